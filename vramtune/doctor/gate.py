"""The gate before the first GPU probe: the checks every measurement depends on (GATING: the device, the counters,
the budget's enforcement) run once per device and Paddle version, and a failed one stops the run with one clear
message instead of measuring wrongly."""
from __future__ import annotations

from typing import Any, Callable

from vramtune.core.records import Device
from vramtune.doctor import saved as saved_results
from vramtune.doctor.base import FAIL
from vramtune.doctor.battery import run_doctor
from vramtune.doctor.checks import GATING
from vramtune.doctor.running import checks_of


class DoctorFailed(Exception):
    """A check the measurements depend on failed on this device (a user-facing error: exit 2)."""


def require_doctor(device: Device, backend: Any, say: Callable[[str], None]) -> None:
    """Run the gating checks not yet saved for this device and Paddle version; raise DoctorFailed if one failed.
    A backend that runs no checks (fake devices, unless a test gives them some) is not gated."""
    checks = checks_of(backend)
    if checks is None:
        return
    known = saved_results.load(device)
    missing = tuple(name for name in GATING if not (known and known.check(name)))
    if missing:
        say(f"doctor: first measurement on {device.name} with Paddle {device.paddle_version}: checking "
            f"{', '.join(missing)} (once per device and Paddle version)")
        result = run_doctor(device.paddle_device, checks, say, names=missing)
        if result.device is not None:
            saved_results.save(result)
        known = result if result.device is None else saved_results.load(device)
    failed = [check for name in GATING if (check := known.check(name)) and check.status == FAIL]
    if failed:
        first = failed[0]
        raise DoctorFailed(f"vramtune doctor: the {first.name} check failed on {device.name} (Paddle "
                           f"{device.paddle_version}): {first.figure}. This means: {first.meaning}. vramtune does not "
                           f"measure on this device until it passes; after fixing it run `vramtune doctor --device "
                           f"{device.paddle_device}` (saved in {saved_results.path_for(device)})")
