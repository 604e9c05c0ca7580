"""Small text helpers shared by the spec reader, the child and the parent."""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from vramtune.core.oom import OOM_MARKERS


def did_you_mean(value: object, options: Iterable[object]) -> str:
    """' (did you mean 'x'?)' for a close option, else ''."""
    close = difflib.get_close_matches(str(value), [str(o) for o in options], n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def error_lines(text: str) -> list[str]:
    """The lines naming an error or an out-of-memory."""
    return [line.strip() for line in text.splitlines() if "Error" in line or any(m in line for m in OOM_MARKERS)]


def error_line(text: str, last: bool = False, default: str = "") -> str:
    """The informative line of a (often very long) Paddle error text: one naming an error or an OOM."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = error_lines(text) or lines or [default]
    return (chosen[-1] if last else chosen[0])[:400]


def short_error(error: BaseException) -> str:
    """An exception in one line: its type and its informative line."""
    return f"{type(error).__name__}: {error_line(str(error))}"[:400]
