"""Tuning cost and choice quality, side by side in one run, on the CPU configs.

For each spec: vramtune's ladder; an exhaustive grid over (micro-batch divisors x recompute layers); and a
halving baseline (start at the target, halve the micro-batch on each miss, like Accelerate's
find_executable_batch_size). Throughput ratios compare the grid's own measurements of each choice, so both
sides of a ratio come from the same kind of probe in the same run. Each choice is confirmed by a 20-step run.

    python bench/run.py [--out bench/results.md] [SPEC ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "configs"), os.environ.get("PYTHONPATH")]))

from vramtune import runner  # noqa: E402
from vramtune.search import Tuner, choose, used_bytes  # noqa: E402
from vramtune.spec import Spec, apply_overrides, load_spec, spec_from_dict  # noqa: E402
from vramtune.strategy import Strategy  # noqa: E402
from vramtune.tuning import problem_for  # noqa: E402

SPECS = ["configs/bert-mini-cpu.yaml", "configs/resnet18-cpu.yaml", "configs/mlp-python-cpu.yaml",
         "tests/specs/rung-recompute.yaml"]


class Counter:
    """A measure function that counts probes and wall time."""

    def __init__(self, spec: Spec, device: dict, budget: int):
        self.spec, self.device, self.budget = spec, device, budget
        self.probes, self.seconds = 0, 0.0

    def __call__(self, strategy: Strategy) -> dict:
        start = time.monotonic()
        result = runner.measure(self.spec, strategy, self.device, self.budget)
        self.probes += 1
        self.seconds += time.monotonic() - start
        return result


def halving(measure: Counter, target: int, sizes: list[int]) -> dict | None:
    micro = target
    while True:
        fitting = [m for m in sizes if m <= micro]
        if not fitting:
            return None
        result = measure(Strategy("fp32", fitting[0], target // fitting[0], 0))
        if result["status"] == "fits":
            return result
        micro = fitting[0] // 2


def confirm(spec: Spec, chosen: dict, device: dict, budget: int) -> str:
    """A 20-step run of the chosen configuration: does its peak stay within the limit?"""
    long_spec = spec_from_dict(apply_overrides(spec.raw, {"probe.steps": 20, "probe.timeout": 600}), spec.path)
    result = runner.measure(long_spec, Strategy.from_json(chosen), device, budget)
    return "yes" if result["status"] == "fits" else f"NO ({result['status']}, {used_bytes(result)} B)"


def bench(path: str) -> dict:
    spec = load_spec(ROOT / path)
    device = runner.describe_device(spec.device)
    budget = spec.budget
    problem = problem_for(spec, device, budget)

    tuned = Counter(spec, device, budget)
    start = time.monotonic()
    chosen = Tuner(tuned, problem).run().chosen
    tuned_wall = time.monotonic() - start

    grid = Counter(spec, device, budget)
    start = time.monotonic()
    sizes, target = problem.micro_batches, problem.target_batch
    first = Strategy("fp32", sizes[0], target // sizes[0], 0)
    results = {first: grid(first)}
    blocks = results[first].get("recompute_blocks") or 0
    for micro in sizes:
        for layers in range(blocks + 1):
            strategy = Strategy("fp32", micro, target // micro, layers)
            if strategy not in results:
                results[strategy] = grid(strategy)
    grid_wall = time.monotonic() - start
    grid_best = choose(results.values())

    halver = Counter(spec, device, budget)
    start = time.monotonic()
    halved = halving(halver, target, sizes)
    halving_wall = time.monotonic() - start

    def grid_ratio(choice: dict | None) -> float | None:
        if not choice or not grid_best:
            return None
        same = results.get(Strategy.from_json(choice))
        return same["samples_per_sec"] / grid_best["samples_per_sec"] if same and same.get("samples_per_sec") else None

    return {
        "spec": path, "target": target, "blocks": blocks,
        "vramtune": (tuned.probes, tuned_wall, chosen, grid_ratio(chosen),
                     confirm(spec, chosen, device, budget) if chosen else "-"),
        "grid": (grid.probes, grid_wall, grid_best, 1.0 if grid_best else None,
                 confirm(spec, grid_best, device, budget) if grid_best else "-"),
        "halving": (halver.probes, halving_wall, halved, grid_ratio(halved),
                    confirm(spec, halved, device, budget) if halved else "-"),
    }


def table(rows: list[dict]) -> str:
    lines = ["| spec | method | probes | wall s | choice | samples/s vs grid best | 20-step peak under budget |",
             "|---|---|---:|---:|---|---:|---|"]
    for row in rows:
        for method in ("vramtune", "grid", "halving"):
            probes, wall, choice, ratio, confirmed = row[method]
            label = Strategy.from_json(choice).label() if choice else "none fits"
            ratio_text = f"{ratio:.2f}" if ratio is not None else "-"
            lines.append(f"| {Path(row['spec']).name} | {method} | {probes} | {wall:.0f} | {label} | {ratio_text} "
                         f"| {confirmed} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="*", default=SPECS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.md"))
    args = parser.parse_args()
    rows = []
    for path in args.specs:
        print(f"benchmarking {path} ...", file=sys.stderr, flush=True)
        rows.append(bench(path))
        print(table(rows[-1:]), file=sys.stderr, flush=True)
    text = table(rows)
    summary = []
    for row in rows:
        tuned, grid = row["vramtune"], row["grid"]
        summary.append(f"- {Path(row['spec']).name}: {tuned[0]}/{grid[0]} probes "
                       f"({tuned[0] / grid[0]:.2f} of the grid), throughput "
                       f"{tuned[3]:.2f} of the grid's best" if tuned[3] is not None else
                       f"- {Path(row['spec']).name}: {tuned[0]}/{grid[0]} probes")
    report = f"{text}\n\n" + "\n".join(summary) + "\n"
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
