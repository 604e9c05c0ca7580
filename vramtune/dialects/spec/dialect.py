"""vramtune's own spec (YAML with model:, data:, train:, search: ...): read as it is, written back with a tuned:
section (export.py)."""
from __future__ import annotations

from pathlib import Path

from vramtune.core.spec import Spec
from vramtune.dialects.base import Dialect, Format, Reading
from vramtune.dialects.spec import export
from vramtune.dialects.yaml_file import read_yaml


def _not_arguments(spec_path: Path, spec: Spec) -> str | None:
    if spec.arguments is not None:
        return f"--format yaml needs a YAML spec; {spec_path} is a PaddleNLP arguments file"
    return None


def _read(path: Path, options: list[str], read_data: bool) -> Reading:
    return Reading(read_yaml(path))


FORMAT = Format(export.NAME, export.SUFFIX, export.render, trained_by="trained with vramtune.runtime",
                refuses=_not_arguments)
DIALECT = Dialect("spec", FORMAT, recognises=lambda path: True, read=_read)
