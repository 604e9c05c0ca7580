"""Writing the answer: the spec plus a `tuned:` section (comments and key order kept), or PaddleNLP
TrainingArguments JSON. Files are written atomically and never overwritten without `force`."""
from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from vramtune import __version__

TUNED_KEYS = ("precision", "micro_batch", "accumulation", "recompute_layers", "recompute_blocks")


class ExportError(Exception):
    """The output cannot be written (exists without --force, unwritable folder, ...)."""


def tuned_section(report: dict[str, Any]) -> dict[str, Any]:
    """What `apply` records about the choice, and what `check` and `vramtune.runtime` read back."""
    chosen = report["chosen"]
    return {
        **{key: chosen[key] for key in TUNED_KEYS},
        "recompute_path": chosen.get("recompute_path"),
        "peak_bytes": chosen["peak_bytes"],
        "reserved_bytes": chosen["reserved_bytes"],
        "budget_bytes": report["budget_bytes"],
        "headroom": report["headroom"],
        "samples_per_sec": round(chosen["samples_per_sec"], 2),
        "device": report["device"]["name"],
        "device_kind": report["device"]["kind"],
        "paddle_version": report["paddle_version"],
        "vramtune_version": __version__,
        "date": datetime.date.today().isoformat(),
    }


_TOP_LEVEL_TUNED = re.compile(r"^tuned\s*:.*?(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


def tuned_yaml(spec_text: str, section: dict[str, Any]) -> str:
    """The original spec text, with any old `tuned:` block replaced by the new one at the end."""
    body = _TOP_LEVEL_TUNED.sub("", spec_text).rstrip("\n")
    block = yaml.safe_dump({"tuned": section}, sort_keys=False, default_flow_style=False)
    header = "# tuned by vramtune: measured, fits the budget; `vramtune check` this file in CI\n"
    return f"{body}\n\n{header}{block}"


def paddlenlp_arguments(spec_name: str, section: dict[str, Any], learning_rate: float) -> tuple[dict, list[str]]:
    """PaddleNLP TrainingArguments fields, and warnings for what does not map."""
    precision, layers, blocks = section["precision"], section["recompute_layers"], section["recompute_blocks"] or 0
    arguments: dict[str, Any] = {
        "output_dir": f"./checkpoints/{spec_name}",
        "per_device_train_batch_size": section["micro_batch"],
        "gradient_accumulation_steps": section["accumulation"],
        "learning_rate": learning_rate,
        "fp16": precision == "fp16",
        "bf16": precision == "bf16",
        "recompute": layers > 0,
    }
    if precision != "fp32":
        arguments["fp16_opt_level"] = "O1"
    warnings = []
    if 0 < layers < blocks:
        warnings.append(
            f"recompute of {layers} of {blocks} blocks does not map: TrainingArguments.recompute recomputes "
            "every layer (it still fits, but is slower than measured); for exactly the measured configuration "
            "train with vramtune.runtime")
    if warnings:
        arguments["_vramtune_comment"] = " ".join(warnings)
    return arguments, warnings


def write_atomic(path: Path, text: str, force: bool) -> None:
    """Write via a temp file and rename, so an interruption leaves the old file or the new one."""
    if path.exists() and not force:
        raise ExportError(f"{path} exists; pass --force to overwrite it")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        if "temporary" in locals():
            Path(temporary).unlink(missing_ok=True)
        raise ExportError(f"cannot write {path}: {error.strerror or error}") from error


def render(format_name: str, spec_path: Path, spec_name: str, learning_rate: float,
           report: dict[str, Any]) -> tuple[str, list[str]]:
    """The output file's text for `apply`, and any warnings."""
    section = tuned_section(report)
    if format_name == "paddlenlp":
        arguments, warnings = paddlenlp_arguments(spec_name, section, learning_rate)
        return json.dumps(arguments, indent=2) + "\n", warnings
    return tuned_yaml(spec_path.read_text(encoding="utf-8"), section), []


def default_output(spec_path: Path, format_name: str) -> Path:
    suffix = ".tuned.json" if format_name == "paddlenlp" else ".tuned.yaml"
    return spec_path.with_name(spec_path.name.removesuffix(".yaml").removesuffix(".yml") + suffix)
