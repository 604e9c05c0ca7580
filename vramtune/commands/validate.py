"""`vramtune validate SPEC...`: check specs without running Paddle, every problem in every file."""
from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from vramtune import render
from vramtune.commands import common
from vramtune.runner import Backend
from vramtune.spec import SpecError, load_spec


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    def validate(
        spec_paths: List[Path] = typer.Argument(..., help="spec files", show_default=False),
        json_output: bool = common.JsonOpt,
    ) -> None:
        """Check specs without running Paddle; reports every problem in every file."""
        files = []
        for path in spec_paths:
            try:
                spec = load_spec(path, read_data=False)  # a pass over training data runs Paddle
                files.append({"file": str(path), "ok": True, "problems": [], "warnings": spec.warnings})
                for warning in spec.warnings:
                    render.warn(warning)
                render.say(f"ok: {path}")
            except SpecError as error:
                files.append({"file": str(path), "ok": False, "problems": [str(p) for p in error.problems],
                              "warnings": []})
                for problem in error.problems:
                    render.error(str(problem))
        if json_output:
            render.emit_json({"valid": all(f["ok"] for f in files), "files": files})
        raise typer.Exit(common.EXIT_OK if all(f["ok"] for f in files) else common.EXIT_BAD_INPUT)
