"""`vramtune measure SPEC -m M ...`: one isolated probe of one strategy."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List, Optional

import typer

from vramtune.checking import gate as checking
from vramtune.checking import stated
from vramtune.commands import common
from vramtune.plugins import SOURCES
from vramtune.probing.runner import Backend
from vramtune.render import output
from vramtune.render.results import render_measure
from vramtune.spec import Problem, SpecError
from vramtune.tuning import session


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    @common.mechanism_flags("fields")
    def measure(spec_path: Path = common.SpecArg, trailing: Optional[List[str]] = common.TrailingArg,
                json_output: bool = common.JsonOpt,
                budget: Optional[str] = common.BudgetOpt, device: Optional[str] = common.DeviceOpt,
                verbose: bool = common.VerboseOpt, kit_options: Optional[List[str]] = common.KitOpt,
                probe_timeout: Optional[float] = common.TimeoutOpt, **flags: Any) -> None:
        """Run one isolated probe of one strategy and print its measurements (exit 1 if it does not fit; on a CPU
        given no --budget, measured without a verdict). A
        PaddleFormers, PaddleNLP or kit file given neither -m nor -k: the strategy the file states."""
        ranks = {"devices": flags["devices"]} if flags.get("devices") else {}  # an arguments file's batch is per rank
        options = common.config_options(kit_options, trailing)
        spec = common.load(spec_path, {**common.overrides(budget, device, None, options, probe_timeout), **ranks},
                           backend)
        given = {name: common.plain(value) for name, value in flags.items()}
        tool_file = checking.is_tool_file(spec)
        if given["micro_batch"] is None and (given["accumulation"] is not None or not tool_file):
            neither = " with -k (give neither for the strategy the file states)" if tool_file else ""
            raise SpecError([Problem(str(spec_path), "--micro-batch", f"is required{neither}")])
        spec_session = session.open_session(spec, backend, warn=output.warn, budget_required=False)
        unjudged = spec_session.budget.bytes == session.NO_BUDGET
        if unjudged:
            output.say("note: no budget given on cpu: measured, not judged (--budget B judges it)")
        if spec_session.budget_note:
            output.say(f"note: {spec_session.budget_note}")
        if given["micro_batch"] is None:  # a tool's own file: the strategy it states, the flags given set over it
            own = stated.stated_strategy(spec, spec_session.device.kind)
            output.say(f"note: the file's strategy: {own.label()}")
            given = {**own.to_json(), **{name: value for name, value in given.items() if value is not None}}
        for note in SOURCES[spec.source].measured_notes(spec.model, spec_session.device.kind):
            output.say(f"note: {note}")
        strategy = session.strategy_from_flags(spec, given)
        common.refuse_layout(spec, strategy, spec_session.device, flag=bool(flags.get("tensor_parallel")))
        for note in session.probe_notes(strategy, spec_session.device.kind):
            output.say(f"note: {note}")
        result = session.measure_checked(spec_session, strategy, on_wait=output.say)
        if unjudged and result.measured:
            result = dataclasses.replace(result, budget_bytes=None)
        render_measure(result, verbose)
        if json_output:
            output.emit_json(result.to_json())
        raise typer.Exit(common.EXIT_OK if result.status in ("fits", "unsupported") else common.EXIT_NO_FIT)
