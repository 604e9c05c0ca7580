"""Tuning cost and choice quality, side by side in one run, on the CPU configs.

For each spec: vramtune's ladder; an exhaustive grid over (micro-batch divisors x recompute blocks), its fastest
and its tie-ruled choice taken at or above the floor vramtune applies (16 for BatchNorm models); and a
halving baseline (start at the target, halve the micro-batch on each miss, like Accelerate's
find_executable_batch_size). Every fitting grid point is measured twice and the spread is reported; ratios
compare the grid's own (mean) measurements of each choice against both the grid's fastest point and its
tie-ruled choice, so both sides of a ratio come from the same run. Each choice is confirmed by a 20-step run.
Then the GPU-shape table (bench/gpu_shapes.py) over fake devices.

    python bench/run.py [--out bench/results.md] [--skip-cpu] [SPEC ...]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "configs"), os.environ.get("PYTHONPATH")]))

from gpu_shapes import shape_table  # noqa: E402

from vramtune.core.records import ProbeResult  # noqa: E402
from vramtune.core.strategy import Strategy  # noqa: E402
from vramtune.plugins import MECHANISMS  # noqa: E402
from vramtune.probing.runner import ChildBackend  # noqa: E402
from vramtune.search import Tuner, choose  # noqa: E402
from vramtune.spec import apply_overrides, load_spec, spec_from_dict  # noqa: E402
from vramtune.tuning.session import measure, open_session, search_problem  # noqa: E402

SPECS = ["configs/bert-mini-cpu.yaml", "configs/resnet18-cpu.yaml", "configs/mlp-python-cpu.yaml",
         "tests/specs/rung-recompute.yaml"]
GRID_REPEATS = 2


class Counter:
    """A measure function that counts probes and wall time."""

    def __init__(self, session):
        self.session, self.probes, self.seconds = session, 0, 0.0

    def __call__(self, strategy: Strategy) -> ProbeResult:
        start = time.monotonic()
        result = measure(self.session, strategy, on_wait=print)
        self.probes += 1
        self.seconds += time.monotonic() - start
        return result


def halving(count: Counter, target: int, sizes: list[int]) -> ProbeResult | None:
    micro = target
    while True:
        fitting = [m for m in sizes if m <= micro]
        if not fitting:
            return None
        result = count(Strategy(precision="fp32", micro_batch=fitting[0], accumulation=target // fitting[0]))
        if result.status == "fits":
            return result
        micro = fitting[0] // 2


def confirm(session, chosen: ProbeResult) -> str:
    """A 20-step run of the chosen configuration: does its peak stay within the limit?"""
    spec = session.spec
    long_spec = spec_from_dict(apply_overrides(spec.raw, {"probe.steps": 20, "probe.timeout": 600}), spec.path)
    result = measure(dataclasses.replace(session, spec=long_spec), chosen.strategy, on_wait=print)
    return "yes" if result.status == "fits" else f"NO ({result.status}, {result.used_bytes} B)"


def grid(session, sizes: list[int], target: int) -> tuple[dict, float, float]:
    """Every (micro-batch, recompute) point; fitting ones measured GRID_REPEATS times, speed averaged."""
    count = Counter(session)
    first = Strategy(precision="fp32", micro_batch=sizes[0], accumulation=target // sizes[0])
    results = {first: count(first)}
    blocks = results[first].facts.get("total_blocks") or 0
    spreads = []
    for micro in sizes:
        for recomputed in range(blocks + 1):
            strategy = first.with_(micro_batch=micro, accumulation=target // micro, recomputed_blocks=recomputed)
            runs = [results.get(strategy) or count(strategy)]
            while runs[0].fits and len(runs) < GRID_REPEATS:
                runs.append(count(strategy))
            speeds = [r.samples_per_sec for r in runs if r.samples_per_sec]
            if len(speeds) > 1:
                spreads.append((max(speeds) - min(speeds)) / statistics.mean(speeds))
            results[strategy] = dataclasses.replace(runs[0], samples_per_sec=statistics.mean(speeds) if speeds
                                                    else None)
    return results, count.probes, max(spreads, default=0.0)


def bench(path: str) -> dict:
    spec = load_spec(ROOT / path)
    session = open_session(spec, ChildBackend(), print)
    problem = search_problem(session)
    sizes, target = problem.micro_batches, problem.target_batch

    tuned = Counter(session)
    start = time.monotonic()
    tuner = Tuner(tuned, problem)
    chosen = tuner.run().chosen
    tuned_wall = time.monotonic() - start
    start = time.monotonic()
    points, grid_probes, spread = grid(session, sizes, target)
    grid_wall = time.monotonic() - start
    floor = tuner.floor  # the grid's choices obey the same floor on the micro-batch (BatchNorm models: 16)
    fitting = [r for r in points.values() if r.fits and r.strategy.micro_batch >= floor]
    fastest = max(fitting, key=lambda r: r.samples_per_sec) if fitting else None
    tie_ruled = choose(MECHANISMS, points.values(), floor)
    halver = Counter(session)
    start = time.monotonic()
    halved = halving(halver, target, sizes)
    halving_wall = time.monotonic() - start

    def ratios(choice: ProbeResult | None) -> tuple[float | None, float | None]:
        same = points.get(choice.strategy) if choice else None
        if not same or not same.samples_per_sec or not fastest:
            return None, None
        return same.samples_per_sec / fastest.samples_per_sec, same.samples_per_sec / tie_ruled.samples_per_sec

    return {
        "spec": path, "spread": spread,
        "vramtune": (tuned.probes, tuned_wall, chosen, *ratios(chosen), confirm(session, chosen) if chosen else "-"),
        "grid": (grid_probes, grid_wall, tie_ruled, *ratios(tie_ruled),
                 confirm(session, tie_ruled) if tie_ruled else "-"),
        "halving": (halver.probes, halving_wall, halved, *ratios(halved), confirm(session, halved) if halved else "-"),
    }


def table(rows: list[dict]) -> str:
    lines = ["| spec | method | probes | wall s | choice | vs grid fastest | vs grid choice | 20-step peak under "
             "budget |", "|---|---|---:|---:|---|---:|---:|---|"]
    for row in rows:
        for method in ("vramtune", "grid", "halving"):
            probes, wall, choice, fastest, tie_ruled, confirmed = row[method]
            label = choice.strategy.label() if choice else "none fits"
            cells = [f"{v:.2f}" if v is not None else "-" for v in (fastest, tie_ruled)]
            lines.append(f"| {Path(row['spec']).name} | {method} | {probes} | {wall:.0f} | {label} | {cells[0]} | "
                         f"{cells[1]} | {confirmed} |")
    return "\n".join(lines)


def ranks_table(path: str = "tests/specs/two-ranks.yaml") -> str:
    """The same model tuned for 1 device and for 2 ranks (sharding available), side by side."""
    lines = ["| spec | devices | probes | wall s | choice | peak per rank |", "|---|---:|---:|---:|---|---:|"]
    for devices in (1, 2):
        spec = load_spec(ROOT / path, {"devices": devices, "train.target_batch": 16 * devices})
        session = open_session(spec, ChildBackend(), print)
        count = Counter(session)
        start = time.monotonic()
        chosen = Tuner(count, search_problem(session)).run().chosen
        label = chosen.strategy.label() if chosen else "none fits"
        peak = f"{chosen.used_bytes / 2**20:.1f} MiB" if chosen else "-"
        lines.append(f"| {Path(path).name} | {devices} | {count.probes} | {time.monotonic() - start:.0f} | {label} | "
                     f"{peak} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="*", default=SPECS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.md"))
    parser.add_argument("--skip-cpu", action="store_true", help="only the GPU-shape table (seconds)")
    args = parser.parse_args()
    sections = []
    if not args.skip_cpu:
        rows = []
        for path in args.specs:
            print(f"benchmarking {path} ...", file=sys.stderr, flush=True)
            rows.append(bench(path))
            print(table(rows[-1:]), file=sys.stderr, flush=True)
        spreads = ", ".join(f"{Path(r['spec']).name} {r['spread']:.1%}" for r in rows)
        sections.append(f"## CPU configs (real Paddle)\n\n{table(rows)}\n\nGrid speed spread between its "
                        f"{GRID_REPEATS} runs of each fitting point (max): {spreads}\n")
        sections.append(f"## One device and two ranks (real Paddle, gloo)\n\n{ranks_table()}\n")
    sections.append(f"## GPU shapes (fake devices)\n\n{shape_table()}\n")
    report = "\n".join(sections)
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
