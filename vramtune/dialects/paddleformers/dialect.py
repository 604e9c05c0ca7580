"""A PaddleFormers 1.x config (the YAML or JSON `paddleformers-cli train` takes, with its key=value overrides): read
as a spec (reading.py), written back as itself (export.py)."""
from __future__ import annotations

from pathlib import Path

from vramtune.core.spec import Spec
from vramtune.dialects.base import Dialect, Format, Reading
from vramtune.dialects.paddleformers import export, stated
from vramtune.dialects.paddleformers.reading import formers_spec


def _written_as_itself_only(format_name: str, spec_path: Path) -> str:
    return (f"--format {format_name} cannot write {spec_path}: a PaddleFormers config is written back as itself "
            f"(--format {export.NAME}), and only it")


def _others(format_name: str, spec_path: Path) -> str | None:
    return None if format_name == export.NAME else _written_as_itself_only(format_name, spec_path)


def _needs_a_config(spec_path: Path, spec: Spec) -> str | None:
    return None if spec.source == export.NAME else _written_as_itself_only(export.NAME, spec_path)


def _read(path: Path, options: list[str], read_data: bool) -> Reading:
    found = formers_spec(path, options, read_data)
    assert found is not None, "recognised as a PaddleFormers config"
    return Reading(*found)


FORMAT = Format(export.NAME, export.SUFFIX, export.render, trained_by="for paddleformers-cli train",
                refuses=_needs_a_config, output_name=export.output_name)
DIALECT = Dialect("paddleformers", FORMAT, recognises=export.is_formers_file, read=_read, takes_options=True,
                  per_rank_batch=True, refuses=_others, stated=stated.stated)
