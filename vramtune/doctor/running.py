"""Running a check's parts: each in a fresh child process (the probe's machinery: its own process group, a timeout,
the same classification of what happened), or over the ranks of `paddle.distributed.launch`. A backend may bring
its own `checks` (a test gives a fake device some); the real backend's run in real children."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

from vramtune.core.records import Device
from vramtune.doctor.base import Check, CheckRun
from vramtune.probing.ranks import launch_devices, launcher_env, rank_logs, read_rank_results
from vramtune.probing.runner import ChildBackend, ChildProcess, child_command, classify

CHILD = Path(__file__).resolve().parent / "child.py"
TIMEOUT = 300.0  # seconds per part


class Checks(Protocol):
    def run(self, check: Check, device: str, part: str, env: dict[str, str], timeout: float) -> CheckRun: ...


class ChildChecks:
    """Each part of a check in a child process of its own."""

    def run(self, check: Check, device: str, part: str, env: dict[str, str], timeout: float) -> CheckRun:
        with tempfile.TemporaryDirectory(prefix="vramtune-doctor-") as folder:
            out = os.path.join(folder, "result.json")
            arguments = [check.name, "--device", device, "--part", part, "--out", out]
            _, child_env = child_command([], env)
            if check.ranks > 1:
                gpus = launch_devices(Device.from_json(json.loads(device)), check.ranks, child_env)
                argv = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(check.ranks),
                        *gpus, "--log_dir", "log", "--job_id", "vramtune-doctor", "--max_restart", "0", "--host",
                        "127.0.0.1", str(CHILD), *arguments]
                child_env = launcher_env(child_env, check.ranks, "gpu")
            else:
                argv = [sys.executable, "-m", "vramtune.doctor.child", *arguments]
            outcome = ChildProcess(argv, child_env, os.path.join(folder, "stderr.txt"), cwd=folder,
                                   graceful=check.ranks > 1).run(timeout)
            payload = _ranks_payload(read_rank_results(out, check.ranks), rank_logs(folder, check.ranks)) \
                if check.ranks > 1 else _read(out)
        result = classify(outcome, payload, timeout)
        figures = {k: v for k, v in result.items() if k not in ("status", "error")}
        return CheckRun(result["status"], figures, result.get("error"), round(outcome.seconds, 2))


def _read(path: str) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _ranks_payload(payloads: list[dict[str, Any] | None], logs: list[str]) -> dict[str, Any]:
    """Every rank's figures; the first rank that did not measure decides the status."""
    for rank, payload in enumerate(payloads):
        if payload is None or payload.get("status") != "measured":
            error = (payload or {}).get("error") or (logs[rank].strip().splitlines() or ["no result"])[-1]
            return {"status": (payload or {}).get("status", "crashed"), "error": f"rank {rank}: {error}"}
    return {"status": "measured", "ranks": payloads}


def checks_of(backend: Any) -> Checks | None:
    """The backend's own checks (fakes bring theirs), real children for the real backend, else None (a backend that
    runs no checks is not gated)."""
    return getattr(backend, "checks", None) or (ChildChecks() if isinstance(backend, ChildBackend) else None)
