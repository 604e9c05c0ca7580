"""A verification run the user names (`--verify-with "python run_finetune.py {file}"`): their own script, whatever it
is, on the tuned file — how vramtune's own spec (a vramtune.runtime loop) and a PaddleNLP arguments file (the user's
Trainer script) are verified. The dialects share it."""
from __future__ import annotations

import os
import shlex

from vramtune.core.verification import STEPS, ToolRun, VerifyRequest

PLACEHOLDER = "{file}"


def problems(command: str) -> list[str]:
    """What is wrong with a --verify-with command (checked before any probe runs)."""
    try:
        parts = shlex.split(command)
    except ValueError as error:
        return [f"--verify-with {command!r}: {error}"]
    if not parts:
        return ["--verify-with is empty: name the command that trains the tuned file, e.g. "
                f"--verify-with \"python train.py {PLACEHOLDER}\""]
    if not any(PLACEHOLDER in part for part in parts):
        return [f"--verify-with {command!r} does not name the tuned file: write {PLACEHOLDER} where it goes"]
    return []


def any_format(request: VerifyRequest) -> ToolRun | str:
    """The user's command on a file in a format other than the file's own (`--format`), which only they can train."""
    return user_run(request, "command")


def user_run(request: VerifyRequest, tool: str, trainer: str = "", file: str | None = None) -> ToolRun | str:
    """The user's command with `{file}` (the tuned file, or `file`: a bounded copy of it) in its place, run from the
    folder vramtune runs in, stopped after STEPS optimizer steps; why not, when no command was given."""
    if not request.command:
        return (f"the {tool} is your own: name it to verify the answer with it, e.g. --verify-with "
                f"\"python train.py {PLACEHOLDER}\" ({PLACEHOLDER}: the tuned file; vramtune stops it after {STEPS} "
                "optimizer steps)")
    argv = [part.replace(PLACEHOLDER, file or str(request.tuned_file)) for part in shlex.split(request.command)]
    env = {"VRAMTUNE_VERIFY_STEPS": str(STEPS), **({"VRAMTUNE_VERIFY_TRAINER": trainer} if trainer else {})}
    return ToolRun(f"your {tool}", argv, os.getcwd(), env)
