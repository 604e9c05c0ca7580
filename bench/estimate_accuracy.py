"""`vramtune estimate` against the measured full-depth peak, on models this CPU runs whole (fp32; a few micro-batches,
with and without recompute): the estimate from CPU probes of a depth-reduced copy, the measurement a real probe of
the whole model, both through the same backend.

    python bench/estimate_accuracy.py [--quick] [--only NAME]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from vramtune.core.strategy import Strategy  # noqa: E402
from vramtune.estimating.spec_estimate import estimate  # noqa: E402
from vramtune.memory.state import Factors, Given, row  # noqa: E402
from vramtune.plugins import MECHANISMS  # noqa: E402
from vramtune.probing.runner import ChildBackend  # noqa: E402
from vramtune.spec import load_spec  # noqa: E402
from vramtune.tuning.session import measure, open_session  # noqa: E402

CPU = Factors(fragmentation=0.0, source="CPU")  # fp32 on the CPU: no AMP factor, no allocator reserve
LLAMA_100M = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768,
              "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 32000,
              "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "pad_token_id": 0, "bos_token_id": 1,
              "eos_token_id": 2}


def specs(folder: Path, quick: bool) -> list[tuple[str, Path, list[int]]]:
    """(name, spec, micro-batches) of the models compared."""
    (folder / "llama-100m").mkdir()
    (folder / "llama-100m" / "config.json").write_text(json.dumps(LLAMA_100M))
    common = {"device": "cpu", "budget": "64GiB", "probe": {"steps": 1, "warmup": 1, "timeout": 900}}

    def write(name: str, body: dict) -> Path:
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": name, **body, **common}))
        return path

    bert = write("bert-base", {"model": {"source": "paddlenlp", "config": "bert-base-uncased",
                                         "task": "sequence-classification"},
                               "data": {"seq_len": 128}, "train": {"target_batch": 16}})
    llama = write("llama-100m", {"model": {"source": "paddlenlp", "config": str(folder / "llama-100m")},
                                 "data": {"seq_len": 512}, "train": {"target_batch": 4}})
    lora = write("llama-100m-lora", {"model": {"source": "paddlenlp", "config": str(folder / "llama-100m")},
                                     "data": {"seq_len": 512}, "train": {"target_batch": 4, "lora": True}})
    resnet = write("resnet50", {"model": {"source": "vision", "arch": "resnet50"},
                                "data": {"image_size": 224, "num_classes": 1000}, "train": {"target_batch": 16}})
    rows = [("BERT-base, 12 layers, seq 128", bert, [4, 16]), ("Llama ~110M, 12 layers, seq 512", llama, [1, 4]),
            ("the same Llama with LoRA r=8", lora, [1, 4]), ("ResNet-50, 224x224", resnet, [4, 16])]
    return rows[:2] if quick else rows


def compare(name: str, path: Path, micro_batches: list[int], backend: ChildBackend) -> list[dict]:
    spec = load_spec(path)
    result = estimate(spec, backend, 64 << 30, None, 1, lambda line: None, CPU)
    session = open_session(spec, backend, print, device=backend.describe("cpu"), budget_bytes=64 << 30)
    rows = []
    for micro in micro_batches:
        for recomputed in (0, result.counts.layers):
            if recomputed and len({r.recomputed_blocks for r in result.rows}) == 1:
                continue  # the model does not recompute
            predicted = row(MECHANISMS, result.counts, result.fit, CPU,
                            Strategy(micro_batch=micro, recomputed_blocks=recomputed), Given(spec.train.optimizer),
                            gpu=False).peak
            measured = measure(session, Strategy(micro_batch=micro, accumulation=spec.train.target_batch // micro,
                                                 recomputed_blocks=recomputed), print)
            rows.append({"model": name, "micro_batch": micro, "recomputed": recomputed, "predicted": predicted,
                         "measured": measured.peak_bytes, "error": predicted / measured.peak_bytes - 1,
                         "probed": result.depth_probed})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="BERT-base and the Llama only")
    parser.add_argument("--only", default="", help="the models whose name contains this")
    options = parser.parse_args()
    backend = ChildBackend()
    folder = Path(tempfile.mkdtemp(prefix="vramtune-estimate-"))
    try:
        lines = ["| model | probed | micro-batch | recompute | estimated | measured | error |",
                 "|---|---|---:|---:|---:|---:|---:|"]
        for name, path, micro_batches in specs(folder, options.quick):
            if options.only not in name:
                continue
            for result in compare(name, path, micro_batches, backend):
                lines.append(f"| {result['model']} | {result['probed']} | {result['micro_batch']} | "
                             f"{result['recomputed'] or '-'} | {result['predicted'] / 2**20:.1f} MiB | "
                             f"{result['measured'] / 2**20:.1f} MiB | {result['error']:+.1%} |")
                print(lines[-1], flush=True)
        print("\n".join(lines))
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
