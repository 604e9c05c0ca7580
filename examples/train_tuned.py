"""A user's own training loop, trained exactly as tuned, with vramtune.runtime.

    vramtune apply configs/mlp-python-cpu.yaml          # writes configs/mlp-python-cpu.tuned.yaml
    python examples/train_tuned.py configs/mlp-python-cpu.tuned.yaml --steps 20

Prints one JSON line: optimizer steps run, the peak memory of the loop (after the first step, as probes
measure it) and the peak recorded at tuning.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import paddle
import paddle.nn.functional as F

from vramtune import runtime
from vramtune.child.counters import MemoryCounters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tuned", help="a file written by `vramtune apply` for configs/mlp-python-cpu.yaml")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps to train")
    args = parser.parse_args()

    plan = runtime.load(args.tuned)
    sys.path.insert(0, str(Path(args.tuned).resolve().parent))
    from mlp_model import build  # the user's own model code

    model = build(in_features=256, width=128, depth=6, classes=10)
    model, _ = plan.prepare(model, lambda parameters: paddle.optimizer.AdamW(learning_rate=1e-3, parameters=parameters))
    on_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    counters = MemoryCounters("gpu" if on_gpu else "cpu", 0)

    def loss_fn(batch):
        features, labels = batch
        return F.cross_entropy(model(features), labels)

    steps = 0
    while steps < args.steps:
        batch = (paddle.randn([plan.micro_batch, 256]), paddle.randint(0, 10, [plan.micro_batch]))
        loss, stepped = plan.step(loss_fn, batch)
        if stepped:
            steps += 1
            if steps == 1:
                counters.start()  # the optimizer state exists now, as in the probes
    peak, _ = counters.peak()
    print(json.dumps({"steps": steps, "loss": float(loss), "peak_bytes": peak,
                      "tuned_peak_bytes": plan.tuned.peak_bytes}))


if __name__ == "__main__":
    main()
