"""A local folder or file an arguments file names, found as PaddleNLP finds it."""
from __future__ import annotations

from pathlib import Path

from vramtune.core.reading import Section
from vramtune.sources.paddlenlp import looks_like_path


def local_path(section: Section, key: str, value: str, wanted: str) -> Path | None:
    """A local folder as PaddleNLP finds it: from the working folder, else next to the file (None when neither)."""
    candidates = [Path.cwd() / value, Path(section.file).resolve().parent / value]
    found = next((p.resolve() for p in candidates if p.exists()), None)
    if found is None and looks_like_path(value):
        section.fail(key, f"{value!r}: no such folder or file (vramtune never downloads: {wanted})")
    return found
