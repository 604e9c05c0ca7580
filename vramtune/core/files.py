"""Atomic file writes: the reader sees the old file or the new one, never a torn one."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path | str, text: str) -> None:
    """Write via a temp file in the target folder, fsync it and the folder, rename over the target.

    The file gets ordinary permissions (0666 less the umask), unlike mkstemp's 0600. Raises OSError; the temp
    file never survives a failure.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fchmod(stream.fileno(), 0o666 & ~_umask())
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot open or fsync a folder
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def cache_root() -> Path:
    """Where results, locks and caches are kept: $VRAMTUNE_CACHE, else .vramtune in the working folder."""
    return Path(os.environ.get("VRAMTUNE_CACHE", ".vramtune"))
