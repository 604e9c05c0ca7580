"""Soak: 50 consecutive probes mixing fitting, OOM, crashing and hanging children.

Checks that every result is classified as expected, that no worker or grandchild process is left behind,
and that the parent's memory stays flat (RSS growth under 50 MB).

    python bench/soak.py [--probes 50]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests" / "faults"),
                                                         os.environ.get("PYTHONPATH")]))

from vramtune import runner  # noqa: E402
from vramtune.spec import spec_from_dict  # noqa: E402
from vramtune.strategy import Strategy  # noqa: E402

EXPECTED = {"none": "fits", "oom": "oom", "sigkill": "crashed", "segfault": "crashed", "hang": "timeout"}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def stray_processes(grandchildren: list[int]) -> list[int]:
    """Our own workers still alive, and grandchildren (from hanging probes) not yet reaped or gone."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "State:\tZ" in status:
            continue
        parent = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if (parent == os.getpid() and "vramtune.worker" in cmdline) or int(entry.name) in grandchildren:
            alive.append(int(entry.name))
    return alive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="vramtune-soak-"))
    device = runner.describe_device("cpu")
    modes = ["none", "oom", "none", "sigkill", "none", "hang", "none", "segfault", "none", "oom"]
    grandchildren: list[int] = []
    counts: dict[str, int] = {}
    wrong = []
    rss_start = None
    start = time.monotonic()
    for index in range(args.probes):
        mode = modes[index % len(modes)]
        pid_file = folder / f"grandchild-{index}.pid"
        spec = spec_from_dict({
            "name": f"soak-{mode}",
            "model": {"source": "python", "factory": "fault_models:build",
                      "kwargs": {"mode": mode, "lo": 8, "pid_file": str(pid_file)}},
            "data": {"inputs": [{"shape": [32], "dtype": "float32"}],
                     "labels": {"shape": [], "dtype": "int64", "high": 4}},
            "train": {"target_batch": 16}, "device": "cpu", "budget": "64MiB",
            "probe": {"steps": 1, "warmup": 1, "timeout": 4},
        }, str(folder / "soak.yaml"))
        result = runner.measure(spec, Strategy("fp32", 16, 1, 0), device, spec.budget)
        if pid_file.exists():
            grandchildren.append(int(pid_file.read_text()))
        counts[result["status"]] = counts.get(result["status"], 0) + 1
        if result["status"] != EXPECTED[mode]:
            wrong.append((index, mode, result["status"], result["error"]))
        if index == 0:
            rss_start = rss_bytes()  # after the first probe: imports and first allocations done
        print(f"[{index + 1:>2}/{args.probes}] {mode:<9} -> {result['status']:<8} {time.monotonic() - start:6.1f}s",
              file=sys.stderr, flush=True)
    time.sleep(0.5)
    strays = stray_processes(grandchildren)
    growth = rss_bytes() - (rss_start or 0)
    print(f"probes: {args.probes} in {time.monotonic() - start:.0f}s; statuses: {counts}")
    print(f"misclassified: {len(wrong)} {wrong if wrong else ''}")
    print(f"leaked processes: {len(strays)} (workers of this process, and {len(grandchildren)} grandchildren "
          f"of hanging probes checked)")
    print(f"parent RSS growth: {growth / 2**20:.1f} MiB (limit 50 MB)")
    ok = not wrong and not strays and growth < 50e6
    print("soak:", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
