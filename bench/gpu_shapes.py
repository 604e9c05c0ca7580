"""The search on GPU-shaped landscapes (fake devices, tests/fakes.py): probes against the exhaustive grid.

    python bench/gpu_shapes.py
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes import Shape, gpu_shapes  # noqa: E402

from vramtune.mechanisms.precision import dtype_of  # noqa: E402
from vramtune.search import SearchProblem, Tuner  # noqa: E402
from vramtune.strategy import Strategy  # noqa: E402


def grid(shape: Shape, prob: SearchProblem) -> list:
    measure = shape.device.measure(prob.budget.bytes, prob.budget.headroom)
    precisions = ["fp32", *[p for p in shape.precisions if dtype_of(p) not in shape.device.amp_unsupported]]
    precisions += ["fp16-safe"] if "fp16" in precisions else []  # tried by itself when fp16 goes non-finite
    return [measure(Strategy(precision=p, micro_batch=m, accumulation=prob.target_batch // m, recomputed_blocks=r))
            for p, m, r in itertools.product(precisions, prob.micro_batches, range(shape.device.blocks + 1))]


def run(shape: Shape) -> dict:
    prob = shape.problem()
    points = grid(shape, prob)
    best = max((r for r in points if r.fits), key=lambda r: r.samples_per_sec)
    shape.device.calls.clear()
    outcome = Tuner(shape.device.measure(prob.budget.bytes, prob.budget.headroom), prob).run()
    chosen = outcome.chosen
    return {"shape": shape.name, "probes": len(shape.device.calls), "grid": len(points), "chosen": chosen,
            "best": best, "ratio": chosen.samples_per_sec / best.samples_per_sec if chosen else 0.0,
            "fits": bool(chosen) and prob.budget.fits(chosen.used_bytes)}


def shape_table() -> str:
    lines = ["| shape | probes | grid | chosen | grid's fastest | vs fastest | under budget |",
             "|---|---:|---:|---|---|---:|---|"]
    for row in map(run, gpu_shapes()):
        chosen = row["chosen"].strategy.label() if row["chosen"] else "none"
        lines.append(f"| {row['shape']} | {row['probes']} | {row['grid']} | {chosen} | "
                     f"{row['best'].strategy.label()} | {row['ratio']:.3f} | {'yes' if row['fits'] else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(shape_table())
