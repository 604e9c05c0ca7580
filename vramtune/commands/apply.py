"""`vramtune apply SPEC`: write the tuned configuration (from saved results; probes first if there are none)."""
from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Optional

import typer

from vramtune import export, render, session
from vramtune.commands import common
from vramtune.runner import Backend

Format = enum.Enum("Format", {name: name for name in export.FORMATS}, type=str)


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    @common.mechanism_flags("options")
    def apply(
        spec_path: Path = common.SpecArg,
        output: Optional[str] = typer.Option(None, "--output", "-o",
                                             help="default: SPEC.tuned.yaml (.tuned.json); - for stdout"),
        format_name: Optional[Format] = typer.Option(None, "--format", help="yaml: the spec + a tuned: section; "
                                                     "paddlenlp: TrainingArguments JSON; arguments: the PaddleNLP "
                                                     "arguments file given, tuned (default: yaml, or arguments "
                                                     "for a .json spec)", show_default=False),
        force: bool = typer.Option(False, "--force", help="overwrite an existing output file"),
        json_output: bool = common.JsonOpt,
        budget: Optional[str] = common.BudgetOpt,
        device: Optional[str] = common.DeviceOpt,
        target_batch: Optional[int] = common.TargetOpt,
        **flags: Any,
    ) -> None:
        """Write the tuned configuration (from saved results; probes first if there are none)."""
        name = common.plain(format_name) or export.default_format(spec_path)
        spec = common.load_tuning_spec(spec_path, budget, device, target_batch, flags)
        export.check_format(name, spec_path, spec)
        out = None if output == "-" else Path(output) if output else export.default_output(spec_path, name)
        if out is not None and out.exists() and not force:
            raise export.ExportError(f"{out} exists; pass --force to overwrite it")
        spec_session = session.open_session(spec, backend, warn=render.warn)
        result = spec_session.store.load_summary()
        if result is None:
            render.say(f"no saved results for {spec.name} on {spec_session.device.name}: probing first")
            result = common.tune_and_show(spec_session)
            if result.interrupted:
                raise typer.Exit(common.EXIT_INTERRUPTED)
        if not result.chosen:
            render.error(f"nothing fits {spec.name} within the budget; see `vramtune probe {spec_path}`")
            raise typer.Exit(common.EXIT_NO_FIT)
        text, warnings = export.render(name, spec_path, spec, result)
        for warning in warnings:
            render.warn(warning)
        if out is None:
            print(text, end="", flush=True)
        else:
            export.write(out, text, force)
            render.say(f"wrote {out}")
        if json_output:
            render.emit_json({"output": str(out) if out else "-", "format": name, "warnings": warnings,
                              "chosen": result.chosen.to_json()})
