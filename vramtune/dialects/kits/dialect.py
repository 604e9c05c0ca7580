"""A kit's training config (PaddleClas, PaddleOCR, PaddleSeg, PaddleDetection), in the user's checkout of the kit,
with the kit's own -o Key=value overrides: read as a spec by its kit's module, written back by export.py."""
from __future__ import annotations

from pathlib import Path

from vramtune.core.spec import Spec
from vramtune.core.strategy import Strategy
from vramtune.dialects.base import Dialect, Format, Reading
from vramtune.dialects.kits import KITS, export, kit_of, kit_spec, kit_stated
from vramtune.dialects.yaml_file import read_yaml


def _written_by_kit_only(format_name: str, spec_path: Path) -> str:
    return (f"--format {format_name} cannot write {spec_path}: --format kit writes a kit's config back, and only "
            "that")


def _needs_a_kit(spec_path: Path, spec: Spec) -> str | None:
    return None if spec.source in export.SOURCES else _written_by_kit_only(export.NAME, spec_path)


def _others(format_name: str, spec_path: Path) -> str | None:
    return None if format_name == export.NAME else _written_by_kit_only(format_name, spec_path)


def _read(path: Path, options: list[str], read_data: bool) -> Reading:
    raw = read_yaml(path)
    kit = kit_of(raw)
    assert kit is not None, "recognised as a kit's config"
    return Reading(*kit_spec(kit, raw, path, options))


def _stated(spec: Spec, device_kind: str) -> Strategy:
    """The strategy the config states, read as its kit reads it (a batch in its base files, or set by the overrides,
    included) over the spec's ranks. A CPU trains fp32 whatever its AMP keys say (Paddle's AMP does nothing there),
    as a probe there runs it."""
    path = Path(spec.path)
    stated = kit_stated(KITS[spec.source], read_yaml(path), path, spec.model.options)
    if device_kind == "cpu":
        stated["precision"] = "fp32"
    return Strategy(devices=spec.devices, **stated)


FORMAT = Format(export.NAME, export.SUFFIX, export.render, trained_by="for the kit's own tools/train.py",
                refuses=_needs_a_kit, prefer=export.prefer)
DIALECT = Dialect("kit", FORMAT, recognises=export.is_kit_config, read=_read, takes_options=True,
                  per_rank_batch=True, refuses=_others, stated=_stated)
