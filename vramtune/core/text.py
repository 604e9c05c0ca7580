"""Small text helpers shared by the spec reader, the child and the parent."""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from vramtune.core.oom import OOM_MARKERS


def did_you_mean(value: object, options: Iterable[object]) -> str:
    """' (did you mean 'x'?)' for a close option, else ''."""
    close = difflib.get_close_matches(str(value), [str(o) for o in options], n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def error_lines(text: str) -> list[str]:
    """The lines naming an error or an out-of-memory."""
    return [line.strip() for line in text.splitlines() if _names_an_error(line)]


# How Paddle frames an error it raises from C++ (phi/core/enforce.h GetCompleteTraceBackString): the C++ traceback's
# header and frames, dashed rules, the summary banner, and the error type alone on its line before the message
FRAMING = re.compile(r"-+$|C\+\+ Traceback \(most recent call last\):$|Error Message Summary:$|\d+\s{2,}\S|\w+Error:$")
GPU_OOM = "Out of memory error on "  # cuda_allocator.cc's sentence, with the sizes
GPU_LIMIT = re.compile(r"Currently `FLAGS_gpu_memory_limit_mb` is (\d+)")


def error_line(text: str, last: bool = False, default: str = "") -> str:
    """The informative line of a (often very long) Paddle error text: Paddle's out-of-memory sentence with its sizes
    (and the memory limit it was under) first, else one naming an error or an OOM; Paddle's framing is skipped."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not FRAMING.match(line.strip())]
    oom = [line for line in lines if line.startswith(GPU_OOM)]
    chosen = oom or [line for line in lines if _names_an_error(line)] or lines or [default]
    line = chosen[-1] if last else chosen[0]
    limit = GPU_LIMIT.search(text) if oom else None
    return (f"{line} (FLAGS_gpu_memory_limit_mb={limit.group(1)})" if limit else line)[:400]


def _names_an_error(line: str) -> bool:
    return "Error" in line or any(marker in line for marker in OOM_MARKERS)


def short_error(error: BaseException) -> str:
    """An exception in one line: its type and its informative line."""
    return f"{type(error).__name__}: {error_line(str(error))}"[:400]
