"""Parent side of multi-rank probes under `paddle.distributed.launch`: the launcher's command for a strategy's ranks,
its environment (free ports, nothing inherited that would reconfigure it), and one result from every rank's."""
from __future__ import annotations

import contextlib
import json
import random
import socket
import sys
from pathlib import Path
from typing import Any, NamedTuple

from vramtune.core.oom import looks_like_oom
from vramtune.core.records import Device
from vramtune.core.strategy import Strategy
from vramtune.core.text import error_line, error_lines

INHERITED_PREFIXES = ("PADDLE_", "MASTER_", "POD_", "FLAGS_START_PORT")  # would override the launcher's options
NO_SUCH_GPU = "Invalid CUDAPlace("  # what Paddle logs before it exits for a GPU ordinal past the count (place.cc)
LOW_PORTS = (20000, 32000)  # below the kernel's ephemeral range, where the launcher's own default lands
WORKER = Path(__file__).resolve().parents[1] / "child" / "worker.py"


class Launch(NamedTuple):
    """A probe run under a launcher: its command, its environment, and how many ranks write a result."""

    argv: list[str]
    env: dict[str, str]
    ranks: int  # each rank writes its own result (OUT.rankN)


def launcher(strategy: Strategy, device: Device, arguments: list[str], env: dict[str, str]) -> Launch | None:
    """Several ranks (every data-parallel rank's tensor-parallel ranks): the worker under paddle.distributed.launch,
    with a free block of ports for the rendezvous and nothing inherited that would reconfigure the launcher; each
    rank writes OUT.rankN. None: one rank, the worker as it is."""
    if strategy.ranks == 1:
        return None
    argv = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(strategy.ranks),
            *launch_devices(device, strategy.ranks, env), "--log_dir", "log", "--job_id", "vramtune",
            "--log_overwrite", "true", "--max_restart", "0", "--host", "127.0.0.1", str(WORKER), *arguments]
    return Launch(argv, launcher_env(env, strategy.ranks, device.kind), strategy.ranks)


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(size: int, tries: int = 50) -> tuple[int, int]:
    """`size` consecutive ports that can be bound now (the launcher takes its rendezvous port from them)."""
    for _ in range(tries):
        start = random.randrange(*LOW_PORTS)
        if all(_free(port) for port in range(start, start + size)):
            return start, start + size
    raise OSError("no block of free ports found for the ranks' rendezvous")


def launcher_env(env: dict[str, str], ranks: int, device_kind: str) -> dict[str, str]:
    start, end = free_port_block(ranks + 1)
    clean = {k: v for k, v in env.items() if not k.startswith(INHERITED_PREFIXES)}
    clean["PORT_RANGE"] = f"{start}:{end}"
    if device_kind == "cpu":
        clean.update(PADDLE_DISTRI_BACKEND="gloo", GLOO_SOCKET_IFNAME="lo")
    return clean


def launch_devices(device: Device, ranks: int, env: dict[str, str]) -> list[str]:
    """The launcher's `--devices` for ranks on GPUs index .. index+ranks-1 (none on a CPU). It takes labels: the
    entries of CUDA_VISIBLE_DEVICES where that is set, else the ordinals (launch/context/device.py); each rank's
    FLAGS_selected_gpus is then its GPU's ordinal, where the worker builds and init_parallel_env places it."""
    if device.kind != "gpu":
        return []
    visible = env.get("CUDA_VISIBLE_DEVICES")
    labels = visible.split(",") if visible is not None and visible != "all" else [str(i) for i in range(device.count)]
    return ["--devices", ",".join(labels[device.index:device.index + ranks])]


def rank_logs(folder: str, ranks: int) -> list[str]:
    """The tail of each rank's log (the launcher's workerlog.N), for a rank that left no result."""
    tails = []
    for rank in range(ranks):
        path = Path(folder, "log", f"workerlog.{rank}")
        try:
            tails.append("\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-60:]))
        except OSError:
            tails.append("")
    return tails


def read_rank_results(out: str, ranks: int) -> list[dict[str, Any] | None]:
    """Each rank's result file (OUT.rankN), None where a rank wrote none or an unreadable one."""
    results = []
    for rank in range(ranks):
        payload = None
        with contextlib.suppress(OSError, ValueError):
            payload = json.loads(Path(f"{out}.rank{rank}").read_text(encoding="utf-8"))
        results.append(payload)
    return results


def merge(payloads: list[dict[str, Any] | None], logs: list[str]) -> dict[str, Any] | None:
    """One result for the probe: a rank that failed decides (one that ran out of memory, else one that died without
    an error of its own, killed, rather than the others aborting on its loss); else the largest rank's peak must
    fit (peak_bytes) and every rank's is kept (rank_peak_bytes); the slowest rank sets the speed."""
    missing = [(rank, log) for rank, (payload, log) in enumerate(zip(payloads, logs)) if payload is None]
    for rank, log in missing:
        if looks_like_oom(log):
            return {"status": "oom", "error": f"rank {rank}: {error_line(log, last=True)}"}
    for rank, log in missing:
        said = [line.strip() for line in log.splitlines() if NO_SUCH_GPU in line]
        if said:  # place.cc logs it and exits (-1): no Python error
            return {"status": "crashed", "error": f"rank {rank} asked Paddle for a GPU that is not there: {said[0]}"}
    for rank, log in missing:
        if not error_lines(log):
            return {"status": "crashed", "error": f"rank {rank} was killed (no error in its log; the system OOM "
                                                  "killer?)"}
    for rank, log in missing:
        return {"status": "crashed", "error": f"rank {rank} ended without a result: {error_line(log, last=True)}"}
    for rank, payload in enumerate(payloads):
        if payload.get("status") != "measured":
            return {**payload, "error": f"rank {rank}: {payload.get('error')}"}
    for rank, payload in enumerate(payloads):
        weights = payload.get("weight_bytes")
        if weights and payload["peak_bytes"] < weights:
            return {"status": "crashed", "error": f"rank {rank} reported a peak of {payload['peak_bytes']} B, below "
                                                  f"its own weights ({weights} B): its counters read another device"}
    peaks = [p["peak_bytes"] for p in payloads]
    slowest = max(payloads, key=lambda p: p["step_seconds"])
    reserved = [p["reserved_bytes"] for p in payloads if p.get("reserved_bytes") is not None]
    return {**slowest, "peak_bytes": max(peaks), "rank_peak_bytes": peaks,
            "reserved_bytes": max(reserved) if reserved else None,
            "optimizer_bytes": max(p.get("optimizer_bytes") or 0 for p in payloads)}


def marked(marker: str) -> list[int]:
    """Processes carrying this probe's environment marker: every process it started, wherever it moved."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
    return found
