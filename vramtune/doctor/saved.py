"""Doctor results under the results cache (.vramtune/doctor/), one file per device and Paddle version: the last
run's, merged check by check (the gate's three checks update a full run's file without dropping the rest)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from vramtune import __version__
from vramtune.core.files import cache_root, write_atomic
from vramtune.core.records import Device
from vramtune.doctor.battery import DoctorResult
from vramtune.doctor.checks import checks as every_check
from vramtune.probing.store import StoreError


def folder() -> Path:
    return cache_root() / "doctor"


def path_for(device: Device) -> Path:
    """e.g. gpu-NVIDIA-A100-SXM4-80GB-paddle-3.3.1.json, cpu-Intel-R-Xeon-R-Processor-paddle-2.6.2.json"""
    name = device.name if device.name.lower().startswith(device.kind) else f"{device.kind}-{device.name}"
    return folder() / (re.sub(r"[^A-Za-z0-9.]+", "-", f"{name}-paddle-{device.paddle_version}").strip("-") + ".json")


def _read(path: Path) -> DoctorResult | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return DoctorResult.from_json(data) if data.get("vramtune") == __version__ else None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable, or from another vramtune: checked again


def load(device: Device) -> DoctorResult | None:
    return _read(path_for(device))


def load_all() -> list[DoctorResult]:
    """Every saved result of this vramtune version (any device), the newest first."""
    found = [result for path in sorted(folder().glob("*.json")) if (result := _read(path)) and result.device]
    return sorted(found, key=lambda result: result.when, reverse=True)


def save(result: DoctorResult) -> Path:
    """Merge with what is saved for the device (the new checks replace the old ones of the same name)."""
    assert result.device is not None
    path = path_for(result.device)
    saved = load(result.device)
    if saved:
        names = {check.name for check in result.checks}
        kept = [check for check in saved.checks if check.name not in names]
        order = [check.name for check in every_check()]
        checks = sorted(kept + result.checks, key=lambda check: order.index(check.name))
        result = DoctorResult(result.device, checks, result.seconds, result.when)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(result.to_json(), indent=1))
    except OSError as error:
        raise StoreError(f"cannot save the doctor's result to {path}: {error.strerror or error}") from error
    return path
