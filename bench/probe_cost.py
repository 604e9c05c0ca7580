"""What a tuning run costs beyond the training it measures, before and after a change, side by side in one run.

    .venv/bin/python bench/probe_cost.py configs/mlp-python-cpu.yaml --before REV [--rounds 3]
    .venv26/bin/python bench/probe_cost.py configs/bert-mini-cpu.yaml --before REV

Each round runs `vramtune probe SPEC --fresh --json` once with vramtune as of REV (exported with `git archive` to a
temporary folder, first on PYTHONPATH; or a folder holding a vramtune package) and once with --after (the same, or
the working tree), alternately, each with its own cache and device lock (other runs on this machine do not make it wait;
they still share the CPU, hence the alternation).
Cost = the command's wall time over the seconds of the measured training steps its probes report (each probe's
`steps` phase). It also checks that both choose the same configuration and that every configuration both measured
peaks at the same bytes.
The floor is what a run keeps whatever vramtune does between its probes: the time before the search (Python's start
and Paddle's import in the warm worker, which vramtune's own start overlaps; the report and the exit, tens of
milliseconds) and the first probe's time outside its phases (the worker's import of the model's framework, PaddleNLP
or PaddleFormers), the warmups (a first micro-batch at each probe's shape: docs/runtime.md) and the measured steps,
over the measured steps."""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_revision(revision: str, folder: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "vramtune"], check=True,
                             capture_output=True).stdout
    target = folder / f"vramtune-{revision}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def code_root(variant: str | None, folder: Path) -> Path:
    """Where a variant's vramtune is imported from: the working tree (None), a folder holding a vramtune package, or
    a revision exported to `folder` (folders compare one change alone while others edit the working tree)."""
    if variant is None:
        return ROOT
    if (Path(variant) / "vramtune").is_dir():
        return Path(variant).resolve()
    return export_revision(variant, folder)


def tune(spec: Path, code_root: Path, scratch: Path) -> dict:
    """One `probe --fresh --json` run with vramtune from `code_root`: its wall seconds, the CPU seconds of all its
    processes (vramtune, the warm worker, the probes: the machine's load moves them less than the wall) and report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code_root), os.environ.get("PYTHONPATH", "")]),
           "VRAMTUNE_CACHE": str(scratch / "cache"), "VRAMTUNE_LOCKS": str(scratch / "locks")}
    start, used = time.monotonic(), cpu_of_children()
    done = subprocess.run([sys.executable, "-m", "vramtune", "probe", str(spec), "--fresh", "--json"], env=env,
                          capture_output=True, text=True, cwd=spec.parent)
    wall, cpu = time.monotonic() - start, cpu_of_children() - used
    if done.returncode not in (0, 1):
        raise SystemExit(f"probe failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return {"wall": wall, "cpu": cpu, "report": report}


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summary(run: dict) -> dict:
    probes = run["report"]["probes"]
    steps = sum((p.get("phases") or {}).get("steps", 0.0) for p in probes)
    phases: dict[str, float] = {}
    for probe in probes:
        for name, seconds in (probe.get("phases") or {}).items():
            phases[name] = phases.get(name, 0.0) + seconds
    chosen = run["report"]["chosen"]
    probe_seconds = sum(p.get("seconds") or 0.0 for p in probes)
    phases["probes outside their phases (the server's imports of the model's framework, fork, files)"] = \
        probe_seconds - sum(sum((p.get("phases") or {}).values()) for p in probes)
    phases["the search between probes"] = run["report"]["seconds"] - probe_seconds
    phases["outside the search (start, Paddle's import in the warm worker, report, exit)"] = \
        run["wall"] - run["report"]["seconds"]
    first = probes[0] if probes else {}
    imports = (run["wall"] - run["report"]["seconds"]  # start, Paddle's import, the report and the exit
               + (first.get("seconds") or 0.0) - sum((first.get("phases") or {}).values()))  # the framework's import
    floor = imports + phases.get("warmup", 0.0) + steps
    return {"wall": run["wall"], "cpu": run["cpu"], "steps": steps,
            "ratio": run["wall"] / steps if steps else float("inf"), "probes": len(probes), "phases": phases,
            "floor": floor / steps if steps else float("inf"),
            "chosen": label(chosen) if chosen else "-",
            "peaks": {label(p): p.get("peak_bytes") for p in probes if p.get("peak_bytes") is not None}}


def label(probe: dict) -> str:
    return (f"{probe['precision']} m={probe['micro_batch']} k={probe['accumulation']} r={probe['recomputed_blocks']}"
            + (" static" if probe.get("to_static") else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path)
    parser.add_argument("--before", required=True, help="the revision (or a folder holding a vramtune package) to "
                                                         "compare with")
    parser.add_argument("--after", default=None, help="the revision with the change, or a folder holding a vramtune "
                                                      "package (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    spec = options.spec.resolve()
    rows: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="probe-cost-") as folder:
        roots = {"before": code_root(options.before, Path(folder)), "after": code_root(options.after, Path(folder))}
        for round_index in range(options.rounds):
            for variant in ("before", "after") if round_index % 2 == 0 else ("after", "before"):
                scratch = Path(folder) / f"{variant}-{round_index}"
                scratch.mkdir()
                row = summary(tune(spec, roots[variant], scratch))
                rows[variant].append(row)
                print(f"{variant:6} round {round_index + 1}: wall {row['wall']:.1f} s, cpu {row['cpu']:.1f} s, "
                      f"measured steps {row['steps']:.1f} s, {row['ratio']:.2f}x, {row['probes']} probes, "
                      f"chosen {row['chosen']}",
                      file=sys.stderr)
    print(f"| {spec.name} | probes | wall s | cpu s (every process) | measured steps s | wall / steps | chosen |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for variant, runs in rows.items():
        median = {key: statistics.median(r[key] for r in runs) for key in ("probes", "wall", "cpu", "steps", "ratio")}
        ratios = ", ".join(format(r["ratio"], ".2f") for r in runs)
        print(f"| {variant} ({options.before if variant == 'before' else options.after or 'working tree'}) | "
              f"{median['probes']:.0f} | {median['wall']:.1f} | {median['cpu']:.1f} | {median['steps']:.1f} | "
              f"{median['ratio']:.2f}x "
              f"(runs: {ratios}) | {', '.join(sorted({r['chosen'] for r in runs}))} |")
    for variant, runs in rows.items():
        floors = ", ".join(format(r["floor"], ".2f") for r in runs)
        print(f"\n{variant}: the floor (imports, warmups and measured steps) over the measured steps: "
              f"{statistics.median(r['floor'] for r in runs):.2f}x (runs: {floors})")
    for variant, runs in rows.items():
        phases = {name: statistics.median(r["phases"].get(name, 0.0) for r in runs) for name in runs[0]["phases"]}
        print(f"\n{variant}: median seconds per phase, summed over a run's probes: "
              + ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items()))
    peaks: dict[str, dict[str, list]] = {}
    for variant, runs in rows.items():
        for run in runs:
            for strategy, peak in run["peaks"].items():
                peaks.setdefault(strategy, {}).setdefault(variant, []).append(peak)
    differing = {strategy: by_variant for strategy, by_variant in peaks.items()
                 if len({peak for values in by_variant.values() for peak in values}) > 1}
    unsteady = {strategy: by_variant for strategy, by_variant in differing.items()
                if any(len(set(values)) > 1 for values in by_variant.values())}  # within one revision too
    between = {strategy: by_variant for strategy, by_variant in differing.items() if strategy not in unsteady}
    print(f"\npeaks of the {len(peaks)} configurations measured: "
          + ("the same to the byte in every run" if not differing else
             f"{len(peaks) - len(differing)} the same to the byte in every run; "
             + (f"DIFFER between the revisions only (bytes by variant): {between}; " if between else "")
             + (f"vary from run to run within one revision too (bytes by variant): {unsteady}" if unsteady else "")))

if __name__ == "__main__":
    main()
