"""The budget a tool's own YAML file was tuned for, kept in the file as a comment the tool ignores (YAML comments
are dropped by every YAML loader: PaddleFormers', the kits'), so `vramtune check FILE` gates it without --budget.
A JSON file (a PaddleNLP arguments file, a PaddleFormers JSON config) has no comments: check takes --budget."""
from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from vramtune.core.units import format_bytes

PREFIX = "# vramtune: tuned for a budget of "
_LINE = re.compile(r"^# vramtune: tuned for a budget of [^\n]*?\((\d+) bytes\)[^\n]*\n?", re.MULTILINE)


def budget_line(budget_bytes: int, options: Sequence[str] = ()) -> str:
    """The comment; `options`: the config's own overrides the run was tuned with (not the tuned keys), which check
    must be given again to measure the same job."""
    given = "".join(f" -O {shlex.quote(option)}" for option in options)
    return (f"{PREFIX}{format_bytes(budget_bytes)} ({budget_bytes} bytes); `vramtune check FILE{given}` gates it "
            "in CI\n")


def with_budget_line(text: str, budget_bytes: int, options: Sequence[str] = ()) -> str:
    """The YAML text with the budget line first (an older one replaced, never added twice)."""
    return budget_line(budget_bytes, options) + without_budget_line(text)


def without_budget_line(text: str) -> str:
    return _LINE.sub("", text)


def recorded_budget(text: str) -> int | None:
    """The budget in bytes the file records, or None."""
    match = _LINE.search(text)
    return int(match.group(1)) if match else None


def recorded_options(text: str) -> list[str]:
    """The config's own overrides the line says check must be given again (budget_line's -O options), or []."""
    match = _LINE.search(text)
    given = match.group(0).partition("`vramtune check FILE")[2].partition("`")[0] if match else ""
    words = shlex.split(given)
    return [option for flag, option in zip(words, words[1:]) if flag == "-O"]
