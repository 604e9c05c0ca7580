"""The search on GPU-shaped landscapes (fake devices, tests/fakes.py): probes against the exhaustive grid; with
--perturbed, the same shapes with the physics the search's prior assumes changed (AMP's activation factors, blocks
saving their whole share, recompute's cost, the counted state, the activation prior x0.5 and x2 or none), one
line per change.

    python bench/gpu_shapes.py [--perturbed]
"""
from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes import Shape, gpu_shapes  # noqa: E402

from vramtune.core.strategy import Strategy, dtype_of  # noqa: E402
from vramtune.search import SearchProblem, Tuner  # noqa: E402


def grid(shape: Shape, prob: SearchProblem) -> list:
    measure = shape.device.measure(prob.budget.bytes, prob.budget.headroom)
    precisions = ["fp32", *[p for p in shape.precisions if dtype_of(p) not in shape.device.amp_unsupported]]
    precisions += ["fp16-safe"] if "fp16" in precisions else []  # tried by itself when fp16 goes non-finite
    return [measure(Strategy(precision=p, micro_batch=m, accumulation=prob.target_batch // m, recomputed_blocks=r))
            for p, m, r in itertools.product(precisions, prob.micro_batches, range(shape.device.blocks + 1))]


def run(shape: Shape) -> dict:
    prob = shape.problem()
    points = grid(shape, prob)
    best = max((r for r in points if r.fits), key=lambda r: r.samples_per_sec, default=None)
    shape.device.calls.clear()
    outcome = Tuner(shape.device.measure(prob.budget.bytes, prob.budget.headroom), prob).run()
    chosen = outcome.chosen
    if best is None:  # nothing in the grid fits: right when the search chooses nothing either
        ratio, fits = float(chosen is None), chosen is None
    else:
        ratio = chosen.samples_per_sec / best.samples_per_sec if chosen else 0.0
        fits = bool(chosen) and prob.budget.fits(chosen.used_bytes)
    return {"shape": shape.name, "probes": len(shape.device.calls), "grid": len(points), "chosen": chosen,
            "best": best, "ratio": ratio, "fits": fits}


def shape_table() -> str:
    lines = ["| shape | probes | grid | chosen | grid's fastest | vs fastest | under budget |",
             "|---|---:|---:|---|---|---:|---|"]
    for row in map(run, gpu_shapes()):
        chosen = row["chosen"].strategy.label() if row["chosen"] else "none"
        best = row["best"].strategy.label() if row["best"] else "none"
        lines.append(f"| {row['shape']} | {row['probes']} | {row['grid']} | {chosen} | "
                     f"{best} | {row['ratio']:.3f} | {'yes' if row['fits'] else 'NO'} |")
    return "\n".join(lines)


def _uncounted(device) -> None:
    """The device's probes report no counted state (a source without a count)."""
    original = device.result
    device.countable = False  # nor does the lazy count
    device.result = lambda s, budget: dataclasses.replace(original(s, budget), weight_bytes=None,
                                                          gradient_bytes=None, optimizer_bytes=None)


PERTURBATIONS = {
    "as stated": lambda d: d,
    "AMP keeps more (O1 0.8, O2 0.75 of fp32)": lambda d: dataclasses.replace(d, amp_factor=0.8, o2_factor=0.75),
    "AMP keeps less (O1 0.45, O2 0.4 of fp32)": lambda d: dataclasses.replace(d, amp_factor=0.45, o2_factor=0.4),
    "a block saves half its share": lambda d: dataclasses.replace(d, saved=d.saved / 2),
    "recompute cheap (0.05 of the step)": lambda d: dataclasses.replace(d, recompute_cost=0.05),
    "recompute costly (0.6 of the step)": lambda d: dataclasses.replace(d, recompute_cost=0.6),
    "no counted state": lambda d: _uncounted(d) or d,
    "activation prior x0.5 (too few)": lambda d: dataclasses.replace(d, prior_scale=0.5),
    "activation prior x2 (too many)": lambda d: dataclasses.replace(d, prior_scale=2.0),
    "no activation prior (no config.json)": lambda d: dataclasses.replace(d, config=None),
}


def perturbed_table() -> str:
    lines = ["| physics | most probes | all probes | worst vs fastest | all under budget |", "|---|---:|---:|---:|---|"]
    for name, change in PERTURBATIONS.items():
        rows = []
        for shape in gpu_shapes():
            shape.device = change(shape.device)
            rows.append(run(shape))
        lines.append(f"| {name} | {max(r['probes'] for r in rows)} | {sum(r['probes'] for r in rows)} | "
                     f"{min(r['ratio'] for r in rows):.3f} | {'yes' if all(r['fits'] for r in rows) else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(perturbed_table() if "--perturbed" in sys.argv[1:] else shape_table())
