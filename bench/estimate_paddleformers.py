"""The question users ask: does ERNIE-4.5-21B-A3B or Qwen3-8B fit a 24 GiB card (an RTX 4090, an A10) or an 80 GiB
one (an A100 or H100 80GB), and how? Runs `vramtune estimate` on PaddleFormers SFT configs (LoRA and full; shaped
like its examples/config/sft files for a GPU: bf16, flashmask attention, max_seq_len 4096 packed, 1 sample x 8
accumulation steps) naming local model folders that hold only the published config.json (tests/specs/configs), on
one card and on 8, and prints the answers with their wall time as a Markdown table. With --check-count, also builds
ERNIE-4.5-21B-A3B with PaddleFormers under paddle.LazyGuard (no memory) and compares its parameters with the
config.json count.

    python bench/estimate_paddleformers.py [--check-count]
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"ERNIE-4.5-21B-A3B-PT": "ernie-4.5-21b-a3b.json", "Qwen3-8B": "qwen3-8b.json"}
CONFIG = """train_dataset_type: erniekit
train_dataset_path: ./data/sft/train.json
max_seq_len: 4096
packing: true
model_name_or_path: ./{model}
_attn_implementation: flashmask
fine_tuning: {fine_tuning}
lora_rank: 8
stage: SFT
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
compute_type: bf16
amp_master_grad: true
sharding: stage1
"""


def answer(folder: Path, config: str, card: str, devices: int) -> tuple[dict, float]:
    vramtune = Path(sys.executable).with_name("vramtune")
    start = time.monotonic()
    done = subprocess.run([str(vramtune), "estimate", config, "--card", card, "--devices", str(devices), "--json"],
                          cwd=folder, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"vramtune estimate {config} failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout), time.monotonic() - start


def described(best: dict | None, layers: int) -> str:
    if best is None:
        return "nothing fits"
    recompute = f", recompute {best['recomputed_blocks']}/{layers}" if best["recomputed_blocks"] else ""
    stage = f", sharding stage {best['sharding_stage']}" if best["sharding_stage"] else ""
    return (f"{best['precision']} m={best['micro_batch']} x {best['accumulation']}{recompute}{stage}: "
            f"{best['reserved_bytes'] / 2**30:.1f} GiB")


def check_count(folder: Path) -> None:
    import paddle
    from paddleformers.transformers import AutoConfig, AutoModelForCausalLM

    from vramtune.memory.architecture import architecture, count, read_config

    model_folder = folder / "ERNIE-4.5-21B-A3B-PT"
    start = time.monotonic()
    with paddle.LazyGuard():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(model_folder)))
    built = sum(math.prod(p.shape) for p in model.parameters())
    counted = count(architecture(read_config(model_folder))).params
    print(f"\nERNIE-4.5-21B-A3B built by PaddleFormers (LazyGuard, {time.monotonic() - start:.1f} s): {built:,} "
          f"parameters; counted from config.json: {counted:,} ({'equal' if built == counted else 'DIFFERENT'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check-count", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="estimate-formers-"))
    print("| model | fine-tuning | card | devices | predicted best (reserved per rank) | time |")
    print("|---|---|---|---:|---|---:|")
    for model, config_json in MODELS.items():
        (folder / model).mkdir()
        shutil.copy(ROOT / "tests" / "specs" / "configs" / config_json, folder / model / "config.json")
        for fine_tuning in ("LoRA", "Full"):
            config = f"{model}-{fine_tuning.lower()}.yaml"
            (folder / config).write_text(CONFIG.format(model=model, fine_tuning=fine_tuning))
            for card in ("24GiB", "80GiB"):
                for devices in (1, 8):
                    report, seconds = answer(folder, config, card, devices)
                    asked = "LoRA" if fine_tuning == "LoRA" else "full"
                    print(f"| {model} | {fine_tuning} | {card} | {devices} | "
                          f"{described(report[asked]['best'], report['layers'])} | {seconds:.1f} s |", flush=True)
    if args.check_count:
        check_count(folder)


if __name__ == "__main__":
    main()
