"""`vramtune probe SPEC`: tune, and print the fastest configuration that fits."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from vramtune.commands import common
from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes
from vramtune.probing.runner import Backend
from vramtune.render import output
from vramtune.render.tuning import choice_line
from vramtune.tuning import session


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    @common.mechanism_flags("options")
    def probe(spec_path: Path = common.SpecArg, trailing: Optional[List[str]] = common.TrailingArg,
              json_output: bool = common.JsonOpt,
              budget: Optional[str] = common.BudgetOpt, device: Optional[str] = common.DeviceOpt,
              target_batch: Optional[int] = common.TargetOpt,
              fresh: bool = typer.Option(False, "--fresh", help="ignore saved results and probe again"),
              verbose: bool = common.VerboseOpt, kit_options: Optional[List[str]] = common.KitOpt,
              probe_timeout: Optional[float] = common.TimeoutOpt, **flags: Any) -> None:
        """Tune: run the probe ladder and print the fastest configuration that fits."""
        spec = common.load_tuning_spec(spec_path, budget, device, target_batch, flags,
                                       common.config_options(kit_options, trailing), backend, probe_timeout)
        spec_session = session.open_session(spec, backend, warn=output.warn)
        layout = Strategy(**session.fixed_layout(spec))  # the file's tensor-parallel degree: kept by the search
        common.refuse_layout(spec, layout, spec_session.device)
        for note in session.probe_notes(layout, spec_session.device.kind):
            output.say(f"note: {note}")
        output.say(f"tuning {spec.name} on {spec_session.device.name} for target batch "
                   f"{spec.train.target_batch} within {format_bytes(spec_session.budget.bytes)}")
        result = common.tune_and_show(spec_session, fresh, verbose)
        if json_output:
            output.emit_json(result.to_json())
        elif not result.interrupted and not one_place():
            print(choice_line(result), flush=True)  # for pipes (`| tee`) and files
        if result.interrupted:
            raise typer.Exit(common.EXIT_INTERRUPTED)
        raise typer.Exit(common.EXIT_OK if result.chosen else common.EXIT_NO_FIT)


def one_place() -> bool:
    """Whether stdout and stderr reach the same place (a terminal, `2>&1`, make's or CI's log), where the report on
    stderr has said the chosen line already."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):  # not a file (an in-process runner's buffers)
        return False
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)
