"""What an out-of-memory looks like, in one place for both sides: the child classifying an exception it caught,
the parent reading a rank's log or a crashed child's stderr. Paddle-free."""
from __future__ import annotations

OOM_MARKERS = ("ResourceExhausted", "Out of memory", "out of memory")
# Paddle wraps the GPU allocator in a RetryAllocator unless this is 0 (allocator_facade.cc): a failed allocation then
# waits FLAGS_gpu_allocator_retry_time (10 s by default) for a free that a single training thread never makes, and
# raises the same out-of-memory error. Every GPU probe and the budget check run without it.
NO_RETRY_ENV = {"FLAGS_gpu_allocator_retry_time": "0"}


def looks_like_oom(text: str) -> bool:
    return any(marker in text for marker in OOM_MARKERS)


def is_oom(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or looks_like_oom(str(error))
