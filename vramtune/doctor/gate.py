"""The gate before the first GPU probe: the checks every measurement depends on (GATING: the device, the counters,
the budget's enforcement, the allocator) run once per device and Paddle version, and before the first probe of
several ranks theirs (MULTI_RANK, after a look at /dev/shm); a failed one stops the run with one clear message
instead of measuring wrongly. The allocator's check is run again when its flags in the environment changed."""
from __future__ import annotations

import os
from typing import Any, Callable

from vramtune.core.records import Device
from vramtune.doctor import saved as saved_results
from vramtune.doctor.allocator import allocator_env
from vramtune.doctor.base import FAIL
from vramtune.doctor.battery import run_doctor
from vramtune.doctor.checks import GATING, MULTI_RANK
from vramtune.doctor.ranks import shm_problem
from vramtune.doctor.running import checks_of


class DoctorFailed(Exception):
    """A check the measurements depend on failed on this device (a user-facing error: exit 2)."""


def require_doctor(device: Device, backend: Any, say: Callable[[str], None], ranks: bool = False) -> None:
    """Run the gating checks (with `ranks`, the multi-rank ones too) not yet saved for this device and Paddle version,
    and the allocator's again where its environment changed; raise DoctorFailed if one failed. A backend that runs no
    checks (fake devices, unless a test gives them some) is not gated."""
    checks = checks_of(backend)
    if checks is None:
        return
    names = GATING + (MULTI_RANK if ranks else ())
    problem = shm_problem() if ranks else None
    if problem:
        raise DoctorFailed(f"vramtune doctor: {problem}")
    known = saved_results.load(device)
    missing = tuple(name for name in names if not (known and known.check(name)))
    env = allocator_env(os.environ)
    allocator = known.check("allocator") if known else None
    changed = ("allocator",) if allocator and allocator.figures.get("", {}).get("env", {}) != env else ()
    if missing:
        say(f"doctor: first measurement on {device.name} with Paddle {device.paddle_version}: checking "
            f"{', '.join(missing)} (once per device and Paddle version)")
    if changed:
        words = ", ".join(f"{name}={value}" for name, value in env.items()) or "the allocator's flags unset"
        say(f"doctor: checking allocator ({words}: not what it was checked under)")
    if missing or changed:
        result = run_doctor(device.paddle_device, checks, say, names=missing + changed)
        if result.device is not None:
            saved_results.save(result)
        known = result if result.device is None else saved_results.load(device)
    failed = [check for name in names if (check := known.check(name)) and check.status == FAIL]
    if failed:
        first = failed[0]
        raise DoctorFailed(f"vramtune doctor: the {first.name} check failed on {device.name} (Paddle "
                           f"{device.paddle_version}): {first.figure}. This means: {first.meaning}. vramtune does not "
                           f"measure on this device until it passes; after fixing it run `vramtune doctor --device "
                           f"{device.paddle_device}` (saved in {saved_results.path_for(device)})")
