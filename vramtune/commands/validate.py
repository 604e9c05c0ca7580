"""`vramtune validate SPEC... [KEY=VALUE]...`: check specs without running Paddle, every problem in every file."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from vramtune.commands import common
from vramtune.core.reading import Problem
from vramtune.dialects.paddleformers.layout import LAYOUT_KEYS, NEUTRAL
from vramtune.dialects.paddleformers.reading import formers_data
from vramtune.probing.runner import Backend
from vramtune.render import output
from vramtune.spec import Spec, SpecError, load_spec


def split(arguments: list[str]) -> tuple[list[Path], list[str]]:
    """The files, and the key=value overrides among them (an argument with `=` that names no file)."""
    overrides = [argument for argument in arguments if "=" in argument and not Path(argument).exists()]
    return [Path(argument) for argument in arguments if argument not in overrides], overrides


def _load(path: Path, changes: dict[str, list[str]]) -> tuple[Spec | None, list[Problem], list[Problem]]:
    """The spec (None: its problems), and the parallel keys of a PaddleFormers config, which `estimate` reads and a
    probe refuses here: the rest of such a file is read again with them off, so that every other problem is found."""
    try:
        return load_spec(path, changes, read_data=False), [], []  # a pass over training data runs Paddle
    except SpecError as error:
        layout = [p for p in error.problems if p.key in LAYOUT_KEYS]
        if not layout or formers_data(path) is None:
            return None, error.problems, []
    off = [f"{p.key}={NEUTRAL[p.key]}" for p in layout]
    try:
        return load_spec(path, {"kit.options": [*changes["kit.options"], *off]}, read_data=False), [], layout
    except SpecError as error:
        return None, error.problems, layout


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    def validate(
        arguments: List[str] = typer.Argument(..., metavar="SPEC [KEY=VALUE]", show_default=False,
                                              help="spec files; a PaddleFormers or kit config's own overrides after "
                                                   "them apply to each, as probe takes them (the same as -O)"),
        json_output: bool = common.JsonOpt,
        kit_options: Optional[List[str]] = common.KitOpt,
    ) -> None:
        """Check specs without running Paddle; reports every problem in every file."""
        spec_paths, trailing = split(arguments)
        if not spec_paths:
            raise common.Failed(f"no spec file among {' '.join(arguments)} (an argument with = that names no file is "
                                "an override): vramtune validate SPEC... [KEY=VALUE]...", common.EXIT_BAD_INPUT)
        changes = {"kit.options": [*(kit_options or []), *trailing]}
        files = []
        for path in spec_paths:
            spec, problems, layout = _load(path, changes)
            warnings = [*(spec.warnings if spec else []), *map(str, layout)]
            files.append({"file": str(path), "ok": spec is not None, "problems": [str(p) for p in problems],
                          "warnings": warnings, **({"estimate_only": [p.key for p in layout]} if layout else {})})
            for warning in warnings:
                output.warn(warning)
            for problem in problems:
                output.error(str(problem))
            if spec:
                output.say(f"ok for estimate: {path} (probe and apply refuse its parallel keys here)" if layout
                           else f"ok: {path}")
        if json_output:
            output.emit_json({"valid": all(f["ok"] for f in files), "files": files})
        raise typer.Exit(common.EXIT_OK if all(f["ok"] for f in files) else common.EXIT_BAD_INPUT)
