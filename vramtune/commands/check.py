"""`vramtune check FILE`: the CI gate (re-measure the tuned configuration, or a tool's file at its own strategy)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from vramtune.checking import gate as checking
from vramtune.commands import common
from vramtune.probing.runner import Backend
from vramtune.render import output
from vramtune.render.results import render_check
from vramtune.spec import Problem, SpecError


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    def check(
        tuned_path: Path = typer.Argument(..., metavar="FILE", help="a file written by `vramtune apply`: a spec with "
                                          "its tuned: section, or a PaddleFormers, PaddleNLP or kit file",
                                          show_default=False),
        trailing: Optional[List[str]] = common.TrailingArg,
        budget: Optional[str] = typer.Option(None, "--budget", help="the budget it must fit, e.g. 24GiB (a "
                                             "PaddleFormers, PaddleNLP or kit file's, unless it records one; "
                                             "overrides a spec's)"),
        tolerance: float = typer.Option(0.05, "--tolerance", help="allowed peak growth since tuning (0.05 = 5%)"),
        device: Optional[str] = common.DeviceOpt,
        strict: bool = typer.Option(False, "--strict", help="exit 1 when the tuned device is not here, instead of "
                                    "a CPU smoke probe"),
        devices: Optional[int] = typer.Option(None, "--devices", min=1, help="re-measure on N ranks instead of the "
                                              "tuned ones (each rank's micro-batch and accumulation kept)"),
        json_output: bool = common.JsonOpt,
        kit_options: Optional[List[str]] = common.KitOpt,
    ) -> None:
        """CI gate: re-probe the tuned configuration; exit 1 if it no longer fits, no longer trains or its peak
        grew. A PaddleFormers, PaddleNLP or kit file: its own strategy, exit 1 if its peak is over the budget. The
        config's own overrides (-O KEY=VALUE or KEY=VALUE after the file) apply to the spec it measures, as apply's."""
        if tolerance < 0:
            raise SpecError([Problem(str(tuned_path), "--tolerance", f"must be 0 or more, got {tolerance}")])
        options = common.config_options(kit_options, trailing)
        spec = common.load(tuned_path, {"budget": budget, "kit.options": options}, backend)
        if checking.is_tool_file(spec):
            verdict = checking.check_file(spec, backend, output.say, device, devices, options)
        else:
            verdict = checking.check(spec, tolerance, backend, output.say, device, strict, devices)
        render_check(verdict)
        if json_output:
            output.emit_json(verdict)
        raise typer.Exit(common.EXIT_NO_FIT if verdict["status"] == "fail" else common.EXIT_OK)
