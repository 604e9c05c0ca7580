"""Soak: 50 consecutive probes mixing fitting, OOM, crashing and hanging children.

Checks that every result is classified as expected, that every hanging probe really started its grandchild,
that nothing is left behind (no process carrying this run's environment marker but the warm fork server, and
none once it is closed; no zombie child, no open file descriptor, no temporary folder), and that the parent's
memory stays flat (RSS growth under 50 MB).

    python bench/soak.py [--probes 50]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests" / "faults"),
                                                         os.environ.get("PYTHONPATH")]))
MARKER = f"soak-{uuid.uuid4().hex}"
os.environ["VRAMTUNE_SOAK_MARKER"] = MARKER  # inherited by every worker and grandchild

from vramtune.core.strategy import Strategy  # noqa: E402
from vramtune.probing.runner import ChildBackend  # noqa: E402
from vramtune.spec import spec_from_dict  # noqa: E402
from vramtune.tuning.session import measure, open_session  # noqa: E402

EXPECTED = {"none": "fits", "oom": "oom", "sigkill": "crashed", "segfault": "crashed", "hang": "timeout"}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def leftovers() -> list[str]:
    """Processes other than this one carrying the marker, and zombie children of this one."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            status = (entry / "status").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        parent = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if "State:\tZ" in status and parent == os.getpid():
            found.append(f"zombie {entry.name}")
        elif MARKER.encode() in environ:
            found.append(f"alive {entry.name}")
    return found


def temp_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("vramtune-*") if p.is_dir()}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    backend = ChildBackend()
    device = backend.describe("cpu")
    modes = ["none", "oom", "none", "sigkill", "none", "hang", "none", "segfault", "none", "oom"]
    counts: dict[str, int] = {}
    wrong, no_grandchild = [], []
    folders_before, fds_before, rss_start = temp_folders(), None, None
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
        session = open_session(spec, backend, print, device=device)
        result = measure(session, Strategy(precision="fp32", micro_batch=16, accumulation=1), print)
        if mode == "hang" and not pid_file.exists():
            no_grandchild.append(index)
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status != EXPECTED[mode]:
            wrong.append((index, mode, result.status, result.error))
        if index == 0:  # after the first probe: imports and first allocations done
            rss_start, fds_before = rss_bytes(), open_fds()
        print(f"[{index + 1:>2}/{args.probes}] {mode:<9} -> {result.status:<8} {time.monotonic() - start:6.1f}s",
              file=sys.stderr, flush=True)
    server = backend.fork_server.process
    server_entry = f"alive {server.pid}" if server is not None else None
    deadline = time.monotonic() + 10  # killed groups are reaped by init: poll until they are gone
    while set(leftovers()) - {server_entry} and time.monotonic() < deadline:
        time.sleep(0.1)
    left = sorted(set(leftovers()) - {server_entry})
    backend.fork_server.close()  # the warm worker lives as long as vramtune does: closed as vramtune's exit closes it
    left += leftovers()
    growth = rss_bytes() - (rss_start or 0)
    new_folders = temp_folders() - folders_before
    fds = open_fds() - (fds_before or 0)
    print(f"probes: {args.probes} in {time.monotonic() - start:.0f}s; statuses: {counts}")
    print(f"misclassified: {len(wrong)} {wrong if wrong else ''}")
    print(f"hanging probes without their grandchild: {len(no_grandchild)} {no_grandchild or ''}")
    print(f"left behind: {len(left)} processes {left or ''}, {len(new_folders)} temporary folders, "
          f"{fds} file descriptors")
    print(f"parent RSS growth: {growth / 2**20:.1f} MiB (limit 50 MB)")
    ok = not (wrong or no_grandchild or left or new_folders or fds > 0) and growth < 50e6
    print("soak:", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
