"""`vramtune apply`'s output: the format a file is written in (the dialects' formats, listed by vramtune/plugins.py),
where it goes, whether it can be written there, and the writing."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vramtune.core.files import write_atomic
from vramtune.core.report import Report
from vramtune.dialects.spec.dialect import FORMAT as YAML_SPEC
from vramtune.plugins import DIALECTS, FORMATS, SOURCES
from vramtune.spec import Spec, dialect_of


class ExportError(Exception):
    """The output cannot be written (exists without --force, unwritable folder, ...)."""


def default_format(spec_path: Path) -> str:
    """The file's own format: a tool's file is written back as that tool's file, a YAML spec as a YAML spec."""
    return dialect_of(spec_path).format.name


def default_output(spec_path: Path, format_name: str) -> Path:
    chosen = FORMATS[format_name]
    if chosen.output_name is not None:
        return spec_path.with_name(chosen.output_name(spec_path))
    stem = spec_path.name
    for suffix in (".yaml", ".yml", ".json", ".tuned"):
        stem = stem.removesuffix(suffix)
    return spec_path.with_name(stem + chosen.suffix)


def check_format(format_name: str, spec_path: Path, spec: Spec) -> None:
    """Before any probing: what the format needs of the file, then whether the file's dialect lets another format
    write it (a kit's or a PaddleFormers config is written back as itself only)."""
    dialect = next(dialect for dialect in DIALECTS if dialect.name == spec.dialect)
    why = FORMATS[format_name].refuses(spec_path, spec) or dialect.refuses(format_name, spec_path)
    if why:
        raise ExportError(why)


def check_output(format_name: str, spec_path: Path, spec: Any, output: Path | None) -> None:
    """Before any probing: the output's folder is there, and a spec written into another folder than its own still
    finds what it names from its folder (a factory module: else `check` and `probe` on the tuned file fail)."""
    if output is None:
        return
    if "=" in output.name and output.suffix not in (".yaml", ".yml", ".json"):  # a kit's `-o Key=value`, typed here
        raise ExportError(f"-o {output}: -o names the file apply writes; a config's own override (a kit's -o) is "
                          f"-O {output}, or {output} after the file")
    folder = output.resolve().parent
    if not folder.is_dir():
        raise ExportError(f"cannot write {output}: " + (f"{output.parent} is not a folder" if folder.exists() else
                                                         f"no such folder: {output.parent}"))
    if format_name != YAML_SPEC.name or str(folder) == spec.base_dir:
        return
    source, model = SOURCES[spec.source], spec.raw.get("model") or {}
    there = source.found_from(spec.model, model, str(folder))
    for key, found in source.found_from(spec.model, model, spec.base_dir).items():
        if found is not None and there.get(key) != found:
            raise ExportError(f"{spec_path}: {key} is found from the spec's folder ({found}); a tuned spec in {folder} "
                              f"would {f'find {there[key]} instead' if there.get(key) else 'not find it'}, so "
                              f"`vramtune check` and `probe` on it would fail: write it in the spec's folder "
                              f"({default_output(spec_path, format_name)} by default, or -o "
                              f"{Path(spec_path).parent / output.name}), or "
                              + source.elsewhere.format(found=found, folder=Path(found).parent))


def prefer(format_name: str, spec: Spec, report: Report) -> tuple[Report, list[str]]:
    """The report with the format's own preferred result as its choice, and why (a format without a preference:
    the report as it is)."""
    chooser = FORMATS[format_name].prefer
    return chooser(spec, report) if chooser else (report, [])


TUNED_FILE = "TUNED_FILE"  # what a training command names when the file goes to stdout


def render(format_name: str, spec_path: Path, spec: Any, report: Report,
           output: Path | None = None) -> tuple[str, list[str]]:
    """The output file's text for `apply`, and any warnings; a format's training command names `output`, the file
    written (TUNED_FILE when it goes to stdout)."""
    return FORMATS[format_name].render(spec_path, spec, report, str(output.resolve()) if output else TUNED_FILE)


def write(path: Path, text: str, force: bool) -> None:
    """Write atomically; never over an existing file without `force`."""
    if path.exists() and not force:
        raise ExportError(f"{path} exists; pass --force to overwrite it")
    try:
        write_atomic(path, text)
    except OSError as error:
        raise ExportError(f"cannot write {path}: {error.strerror or error}") from error
