"""The activation coefficients of vramtune/estimating/llama.py (the auto_tuner tool's Llama model), fitted to
PaddleFormers' Llama (SFT, full fine-tuning, packed to max_seq_len, fp32, eager attention) measured whole on CPU by
`vramtune measure` (the allocator's peak) at several shapes: hidden, intermediate, layers, heads, sequence,
vocabulary and micro-batch. Activations (the peak less the weights, gradients and AdamW state) per sample, in fp32
bytes: L * (SBH*s*h + SBF*s*f + AS2B*a*s^2) + LOGITS*s*V + OUTSIDE*s*h, fitted by least squares on the relative
error. Prints each shape's measured and predicted activations and peak (with llama.py's constants), the fit, and the
worst error. Run in the environment the constants are for (.venv: Paddle 3 with PaddleFormers):

    .venv/bin/python bench/llama_activations.py
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from vramtune.estimating import llama  # noqa: E402
from vramtune.memory.fitting import linear_fit  # noqa: E402

TOKENIZER = ROOT / "tests" / "specs" / "formers" / "llama"
SHAPES = [  # hidden, intermediate, layers, heads, seq, vocab, micro-batch
    (64, 128, 2, 4, 128, 500, 4), (128, 256, 2, 4, 128, 1000, 8), (128, 512, 3, 2, 256, 1000, 4),
    (256, 512, 2, 8, 128, 2000, 4), (128, 256, 6, 4, 64, 1000, 16), (192, 384, 3, 6, 384, 3000, 2),
    (256, 1024, 4, 4, 256, 500, 2), (64, 256, 4, 2, 512, 4000, 2), (384, 768, 2, 12, 192, 1500, 3),
    (96, 384, 5, 3, 320, 2500, 4),
]
HELD_OUT = (128, 256, 4, 4, 256, 1000, 8)  # tests/paddle/test_autotuner.py's shape, not fitted to
SIDE_BY_SIDE = 2  # measurements of memory, each its own process and peak


def formers_config(folder: Path, h: int, f: int, layers: int, a: int, s: int, v: int, m: int) -> Path:
    """A PaddleFormers SFT config (full fine-tuning, packed, fp32 on CPU) on a random-init Llama of that shape."""
    model = folder / "llama"
    shutil.copytree(TOKENIZER, model, ignore=shutil.ignore_patterns("config.json"))
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h, "intermediate_size": f,
        "num_hidden_layers": layers, "num_attention_heads": a, "num_key_value_heads": a, "vocab_size": v,
        "max_position_embeddings": max(512, s), "rms_norm_eps": 1e-6, "pad_token_id": 3, "bos_token_id": 1,
        "eos_token_id": 2, "tie_word_embeddings": False, "fuse_rms_norm": False}))
    keys = {"stage": "SFT", "train_dataset_type": "erniekit", "train_dataset_prob": "1.0",
            "train_dataset_path": str(TOKENIZER.parent / "sft.jsonl"), "max_seq_len": s, "packing": True,
            "mix_strategy": "concat", "model_name_or_path": str(model), "continue_training": False,
            "fine_tuning": "full", "lora": False, "do_train": True, "per_device_train_batch_size": m, "max_steps": 1,
            "output_dir": str(folder / "out"), "save_strategy": "no", "learning_rate": 1.0e-4, "device": "cpu",
            "compute_type": "float32", "amp_master_grad": False, "_attn_implementation": "eager", "sharding": ""}
    path = folder / "sft.yaml"
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in keys.items()))
    return path


def measure(shape: tuple[int, ...]) -> dict:
    """`vramtune measure` on the shape: its peak, and the weights, gradients and optimizer state in it."""
    folder = Path(tempfile.mkdtemp(prefix="vramtune-llama-"))
    try:
        path = formers_config(folder, *shape)
        done = subprocess.run([sys.executable, "-m", "vramtune", "measure", str(path), "--micro-batch", str(shape[-1]),
                               "--budget", "8GiB", "--json"], capture_output=True, text=True, cwd=folder)
        if done.returncode != 0:
            raise SystemExit(f"{shape}: vramtune measure failed\n{done.stderr[-2000:]}")
        return json.loads(done.stdout)
    finally:
        shutil.rmtree(folder)


def terms(shape: tuple[int, ...]) -> list[float]:
    """Per sample: the layers' s*h, s*f and a*s^2 (times L), and s*V and s*h outside them."""
    h, f, layers, a, s, v, _ = shape
    return [layers * s * h, layers * s * f, layers * a * s * s, s * v, s * h]


def predicted(shape: tuple[int, ...]) -> tuple[float, float]:
    """llama.py's activations and allocated peak (no GPU reserve) for the shape, fp32, one rank."""
    h, f, layers, a, s, v, m = shape
    model, parallel = llama.Llama(h, layers, a, v, f, s), llama.Parallel(micro_batch=m)
    activations = llama.activation_bytes(model, parallel, "fp32")
    return activations, activations + llama.state_bytes(model, parallel, "fp32")


def main() -> None:
    print(f"PaddleFormers {version('paddleformers')}'s Llama on Paddle {version('paddlepaddle')}, CPU, fp32, "
          "full fine-tuning, packed", flush=True)
    results = []
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        for shape, result in zip(SHAPES, pool.map(measure, SHAPES)):
            print(f"measured {shape}: peak {result['peak_bytes']:,} B", flush=True)
            results.append(result)
    activations = [r["peak_bytes"] - r["weight_bytes"] - r["gradient_bytes"] - r["optimizer_bytes"] for r in results]
    rows = [[t * shape[-1] / act for t in terms(shape)] for shape, act in zip(SHAPES, activations)]
    fit = linear_fit(rows, [1.0] * len(rows))
    print(f"\nfit: ACTIVATION_SBH = {fit[0]:.2f}  ACTIVATION_SBF = {fit[1]:.2f}  ACTIVATION_AS2B = {fit[2]:.2f}  "
          f"LOGITS_BYTES = {fit[3]:.2f}  OUTSIDE_SBH = {fit[4]:.2f}")
    print(f"llama.py: ACTIVATION_SBH = {llama.ACTIVATION_SBH}  ACTIVATION_SBF = {llama.ACTIVATION_SBF}  "
          f"ACTIVATION_AS2B = {llama.ACTIVATION_AS2B}  LOGITS_BYTES = {llama.LOGITS_BYTES}  "
          f"OUTSIDE_SBH = {llama.OUTSIDE_SBH}\n")
    print("| h | f | L | a | s | V | m | activations measured | llama.py | error | peak measured | llama.py | error |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    errors = []
    for shape, result, act in zip(SHAPES, results, activations):
        model, peak = predicted(shape)
        errors.append(peak / result["peak_bytes"] - 1)
        print("| " + " | ".join(map(str, shape)) + f" | {act:,} | {model:,.0f} | {model / act - 1:+.1%} | "
              f"{result['peak_bytes']:,} | {peak:,.0f} | {errors[-1]:+.1%} |")
    worst = max(errors, key=abs)
    print(f"\nworst error of llama.py's peak over the {len(SHAPES)} shapes: {worst:+.1%}")


if __name__ == "__main__":
    main()
