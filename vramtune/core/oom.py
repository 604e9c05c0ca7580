"""What an out-of-memory looks like, in one place for both sides: the child classifying an exception it caught,
the parent reading a rank's log or a crashed child's stderr. Paddle-free."""
from __future__ import annotations

OOM_MARKERS = ("ResourceExhausted", "Out of memory", "out of memory")


def looks_like_oom(text: str) -> bool:
    return any(marker in text for marker in OOM_MARKERS)


def is_oom(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or looks_like_oom(str(error))
