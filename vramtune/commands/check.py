"""`vramtune check TUNED`: the CI gate (re-measure the tuned configuration)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vramtune import checking, render
from vramtune.commands import common
from vramtune.runner import Backend
from vramtune.spec import Problem, SpecError, load_spec


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    def check(
        tuned_path: Path = typer.Argument(..., help="a file written by `vramtune apply`", show_default=False),
        tolerance: float = typer.Option(0.05, "--tolerance", help="allowed peak growth since tuning (0.05 = 5%)"),
        device: Optional[str] = common.DeviceOpt,
        strict: bool = typer.Option(False, "--strict", help="exit 1 when the tuned device is not here, instead of "
                                    "a CPU smoke probe"),
        devices: Optional[int] = typer.Option(None, "--devices", min=1, help="re-measure on N ranks instead of the "
                                              "tuned ones (each rank's micro-batch and accumulation kept)"),
        json_output: bool = common.JsonOpt,
    ) -> None:
        """CI gate: re-probe the tuned configuration; exit 1 if it no longer fits, no longer trains or its peak
        grew."""
        if tolerance < 0:
            raise SpecError([Problem(str(tuned_path), "--tolerance", f"must be 0 or more, got {tolerance}")])
        spec = load_spec(tuned_path)
        verdict = checking.check(spec, tolerance, backend, render.say, device, strict, devices)
        render.render_check(verdict)
        if json_output:
            render.emit_json(verdict)
        raise typer.Exit(common.EXIT_NO_FIT if verdict["status"] == "fail" else common.EXIT_OK)
