"""A PaddleNLP arguments file — the JSON given to PaddleNLP's llm scripts and Trainer scripts — read as a spec.

TrainingArguments keys plus the llm scripts' model and data keys; only what decides memory is read, every other
key is kept untouched for `vramtune apply`. The target batch is per_device_train_batch_size x
gradient_accumulation_steps; the sequence length is max_length, max_seq_length or src_length + tgt_length.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.reading import Problem, Section, SpecError, positive, read_spec_text
from vramtune.sources.paddlenlp import config_file, looks_like_path

SEQUENCE_KEYS = ("max_length", "max_seq_length")
TRAINER_OPTIMIZERS = {"adamw": "adamw"}  # PaddleNLP 2.8's Trainer: optim adamw | adafactor


def read_arguments(path: Path) -> dict[str, Any]:
    file = str(path)
    text = read_spec_text(path)
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as error:
        raise SpecError([Problem(file, "", f"line {error.lineno}, column {error.colno}: JSON syntax error: "
                                           f"{error.msg}")]) from None
    if not isinstance(arguments, dict):
        raise SpecError([Problem(file, "", "must be a JSON object of PaddleNLP arguments")])
    return arguments


def _model_path(section: Section, value: str) -> str | None:
    """A local model folder as PaddleNLP would find it (from the working folder, else next to the file); a
    built-in configuration name as it is."""
    candidates = [Path.cwd() / value, Path(section.file).resolve().parent / value]
    found = next((p.resolve() for p in candidates if p.exists()), None)
    if found is None:
        if looks_like_path(value):
            section.fail("model_name_or_path", f"{value!r}: no such folder or file (vramtune never downloads: give a "
                                               "built-in PaddleNLP name or a local folder with config.json)")
            return None
        return value
    if not config_file(found).is_file():
        section.fail("model_name_or_path", f"{value!r}: the folder has no config.json (its model configuration; "
                                           "weights are never loaded)")
        return None
    return str(found)


def _sequence_length(section: Section) -> int | None:
    for key in SEQUENCE_KEYS:
        if section.data.get(key) is not None:
            return section.get(key, int, check=positive(1 << 20))
    if section.data.get("src_length") is not None or section.data.get("tgt_length") is not None:
        source = section.get("src_length", int, check=positive(1 << 20))
        target = section.get("tgt_length", int, check=positive(1 << 20))
        return source + target if source and target else None
    section.fail("", "needs the sequence length: max_length, max_seq_length or src_length + tgt_length")
    return None


def spec_from_arguments(arguments: dict[str, Any], file: str) -> dict[str, Any]:
    """The raw spec (as a YAML spec would give it) for a PaddleNLP arguments file."""
    problems: list[Problem] = []
    section = Section(problems, file, "", arguments)
    model = section.get("model_name_or_path", str)
    model = _model_path(section, model) if model else None
    seq_len = _sequence_length(section)
    micro = section.get("per_device_train_batch_size", int, 8, check=positive(1 << 20))
    accumulation = section.get("gradient_accumulation_steps", int, 1, check=positive(1 << 16))
    learning_rate = section.get("learning_rate", float, 5.0e-5, check=positive())
    optim = section.get("optim", str, "adamw", choices=("adamw", "adafactor"))
    if optim == "adafactor":
        section.fail("optim", "adafactor is not measured by vramtune; tune with optim: adamw")
    device = section.get("device", str, "auto")
    if problems:
        raise SpecError(problems)
    return {
        "name": Path(file).stem,
        "model": {"source": "paddlenlp", "config": model},
        "data": {"seq_len": seq_len},
        "train": {"target_batch": micro * accumulation, "optimizer": "adamw", "learning_rate": learning_rate},
        "device": device if device in ("cpu", "gpu") or device.startswith("gpu:") else "auto",
        "budget": "auto",
    }
