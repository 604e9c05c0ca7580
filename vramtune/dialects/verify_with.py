"""A verification run the user names (`--verify-with "python run_finetune.py {file}"`): their own script, whatever it
is, on the tuned file — how vramtune's own spec (a vramtune.runtime loop) and a PaddleNLP arguments file (the user's
Trainer script) are verified. The dialects share it."""
from __future__ import annotations

import os
import shlex

from vramtune.core.verification import ToolRun, VerifyRequest

PLACEHOLDER = "{file}"


def user_run(request: VerifyRequest, tool: str, trainer: str = "", file: str | None = None) -> ToolRun | str:
    """The user's command with `{file}` (the tuned file, or `file`: a bounded copy of it) in its place, run from the
    folder vramtune runs in; why not, when no command was given."""
    if not request.command:
        return (f"{tool} is your own script: name it to verify the answer with it, e.g. --verify-with "
                f"\"python train.py {PLACEHOLDER}\" ({PLACEHOLDER}: the tuned file; bound it to a few steps)")
    if PLACEHOLDER not in request.command:
        return f"--verify-with {request.command!r} does not name the tuned file: write {PLACEHOLDER} where it goes"
    argv = [part.replace(PLACEHOLDER, file or str(request.tuned_file)) for part in shlex.split(request.command)]
    return ToolRun(f"your {tool}", argv, os.getcwd(), {"VRAMTUNE_VERIFY_TRAINER": trainer} if trainer else {})
