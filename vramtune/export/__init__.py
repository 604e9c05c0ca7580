"""Output formats for `vramtune apply`. Adding one: a module with NAME, SUFFIX and render(), one line here."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vramtune.core.files import write_atomic
from vramtune.core.report import Report
from vramtune.dialects.kits import export as kit_config
from vramtune.dialects.paddleformers import export as formers_config
from vramtune.dialects.paddlenlp import arguments_file
from vramtune.dialects.paddlenlp import export as paddlenlp_args
from vramtune.dialects.spec import export as yaml_spec
from vramtune.plugins import SOURCES

FORMATS = {module.NAME: module for module in (yaml_spec, paddlenlp_args, arguments_file, kit_config,
                                              formers_config)}


class ExportError(Exception):
    """The output cannot be written (exists without --force, unwritable folder, ...)."""


def default_format(spec_path: Path) -> str:
    """A PaddleNLP arguments file is written back as one, a kit's config as the same config; a YAML spec as YAML."""
    if formers_config.is_formers_file(spec_path):
        return formers_config.NAME
    if spec_path.suffix == ".json":
        return arguments_file.NAME
    return kit_config.NAME if kit_config.is_kit_config(spec_path) else yaml_spec.NAME


def default_output(spec_path: Path, format_name: str) -> Path:
    if format_name == formers_config.NAME:
        return spec_path.with_name(formers_config.output_name(spec_path))
    stem = spec_path.name
    for suffix in (".yaml", ".yml", ".json", ".tuned"):
        stem = stem.removesuffix(suffix)
    return spec_path.with_name(stem + FORMATS[format_name].SUFFIX)


def check_format(format_name: str, spec_path: Path, spec: Any) -> None:
    """Before any probing: the arguments format writes back an arguments file, yaml a YAML spec."""
    if format_name == arguments_file.NAME and spec.arguments is None:
        raise ExportError(f"--format arguments needs a PaddleNLP arguments file (.json); {spec_path} is a YAML spec")
    if format_name == yaml_spec.NAME and spec.arguments is not None:
        raise ExportError(f"--format yaml needs a YAML spec; {spec_path} is a PaddleNLP arguments file")
    if (format_name == kit_config.NAME) != (spec.source in kit_config.SOURCES):
        raise ExportError(f"--format {format_name} cannot write {spec_path}: --format kit writes a kit's config back, "
                          "and only that")
    if (format_name == formers_config.NAME) != (spec.source == formers_config.NAME):
        raise ExportError(f"--format {format_name} cannot write {spec_path}: a PaddleFormers config is written back "
                          "as itself (--format paddleformers), and only it")


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
    if format_name != yaml_spec.NAME or str(folder) == spec.base_dir:
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


def prefer(format_name: str, spec: Any, report: Report) -> tuple[Report, list[str]]:
    """The report with the format's own preferred result as its choice, and why (a format without a preference:
    the report as it is)."""
    chooser = getattr(FORMATS[format_name], "prefer", None)
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
