"""Where output goes: people's (rich, on stderr) and machines' (JSON, on stdout). No decisions are made here."""
from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console(stderr=True, highlight=False, soft_wrap=True)
if not console.is_terminal:  # logs and CI: wide enough for the probe table
    console.width = 140
STATUS_STYLE = {"fits": "green", "over_budget": "yellow", "oom": "red", "crashed": "red", "timeout": "red",
                "unstable": "magenta", "unsupported": "dim"}


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=1, default=str) + "\n")
    sys.stdout.flush()


def say(message: str) -> None:
    """A plain line for people, on stderr (never read as markup)."""
    console.print(message, markup=False)


def error(message: str) -> None:
    """One problem on stderr: in colour on a terminal, plain text elsewhere (logs, CI, tests)."""
    if console.is_terminal:
        console.print(f"[bold red]error:[/] {escape(message)}")
    else:
        print(f"error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    if console.is_terminal:
        console.print(f"[bold yellow]warning:[/] {escape(message)}")
    else:
        print(f"warning: {message}", file=sys.stderr)


def styled_status(status: str) -> str:
    """A probe's status in its colour (rich markup)."""
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"
