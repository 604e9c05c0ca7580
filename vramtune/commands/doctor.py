"""`vramtune doctor [--device D] [--json]`: check, on this device, every assumption vramtune's measurements rest on
(vramtune/doctor/); the result is saved per device and Paddle version. Exit 1 when a check fails."""
from __future__ import annotations

from typing import Optional

import typer

from vramtune.commands import common
from vramtune.doctor import saved
from vramtune.doctor.base import FAIL, PASS, SKIP
from vramtune.doctor.battery import run_doctor
from vramtune.doctor.running import checks_of
from vramtune.probing.runner import Backend, DeviceError
from vramtune.render import output
from vramtune.spec.schema import DEVICE_PATTERN


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    def doctor(device: Optional[str] = common.DeviceOpt, json_output: bool = common.JsonOpt) -> None:
        """Check what vramtune's measurements rest on, on this device (default: auto, a GPU where Paddle sees one):
        counters, budget, AMP, recompute, ranks."""
        if device is not None and not DEVICE_PATTERN.match(device):
            raise DeviceError(f"--device {device!r}: must be auto, cpu, gpu or gpu:N")
        output.say("vramtune doctor: each check in a process of its own")
        checks = checks_of(backend)
        if checks is None:
            raise DeviceError("this measuring backend runs no doctor checks")
        result = run_doctor(device or "auto", checks, output.say)
        counts = {status: sum(c.status == status for c in result.checks) for status in (PASS, FAIL, SKIP)}
        summary = (f"doctor: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped in "
                   f"{result.seconds:.1f}s")
        if result.device is not None:
            summary += f"; saved to {saved.save(result)}"
        output.say(summary)
        if json_output:
            output.emit_json(result.to_json())
        raise typer.Exit(common.EXIT_NO_FIT if result.failed else common.EXIT_OK)
