"""A PaddleNLP arguments file — the JSON given to PaddleNLP's llm scripts and Trainer scripts — read as a spec.

Every key is accounted for. The keys that decide the run are read here (model, sequence length, batch, learning
rate, optimizer, gradient clipping, the model configuration fields the llm scripts set, zero padding) or by the
codec (codec.py: precision, recompute, sharding, ...); a key that changes memory and that nothing reads is refused by
name (keys.py); a key PaddleNLP does not know is named in one warning.
Every other key is kept untouched for `vramtune apply`. The target batch is per_device_train_batch_size x
gradient_accumulation_steps (x the data-parallel ranks); the sequence length is max_length (llm scripts) or
max_seq_length (Trainer examples), or src_length + tgt_length (older llm scripts).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.core.reading import Problem, Section, SpecError, positive, read_spec_text
from vramtune.dialects.paddlenlp.codec import from_arguments
from vramtune.dialects.paddlenlp.keys import KNOWN, refusal
from vramtune.dialects.paddlenlp.local import local_path
from vramtune.sources.paddlenlp import config_file, looks_like_path

SEQUENCE_KEYS = ("max_length", "max_seq_length")
SCRIPT_MAX_LENGTH = 2048  # the llm scripts' DataArgument.max_length
# ModelArgument fields the llm scripts copy onto the model's configuration before building it
CONFIG_FIELDS = ("use_flash_attention", "use_fused_rms_norm", "fuse_attention_qkv", "fuse_attention_ffn",
                 "use_fused_rope", "recompute_use_reentrant", "hidden_dropout_prob", "attention_probs_dropout_prob")
TRAINER_MAX_GRAD_NORM = 1.0  # TrainingArguments.max_grad_norm: the Trainer clips by default


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
    """A local model folder, or a built-in configuration name as it is."""
    found = local_path(section, "model_name_or_path", value,
                       "give a built-in PaddleNLP name or a local folder with config.json")
    if found is None:
        return None if looks_like_path(value) else value
    if not config_file(found).is_file():
        section.fail("model_name_or_path", f"{value!r}: the folder has no config.json (its model configuration; "
                                           "weights are never loaded)")
        return None
    return str(found)


def _sequence_length(section: Section, warnings: list[str]) -> int | None:
    for key in SEQUENCE_KEYS:
        if section.data.get(key) is not None:
            return section.get(key, int, check=positive(1 << 20))
    source = section.get("src_length", int, None, check=positive(1 << 20))
    target = section.get("tgt_length", int, None, check=positive(1 << 20))
    if source and target:
        return source + target
    warnings.append(f"{section.file}: no max_length: the llm scripts' default, {SCRIPT_MAX_LENGTH} tokens, is measured "
                    "(their sequences are at most max_length; src_length only cuts the prompt)")
    return SCRIPT_MAX_LENGTH


def _set(raw: dict[str, Any], dotted: str, value: Any) -> None:
    node = raw
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def spec_from_arguments(arguments: dict[str, Any], file: str) -> tuple[dict[str, Any], list[str]]:
    """The raw spec (as a YAML spec would give it) for a PaddleNLP arguments file, and warnings for the user."""
    problems: list[Problem] = []
    warnings: list[str] = []
    section = Section(problems, file, "", arguments)
    model = section.get("model_name_or_path", str)
    model = _model_path(section, model) if model else None
    seq_len = _sequence_length(section, warnings)
    micro = section.get("per_device_train_batch_size", int, 8, check=positive(1 << 20))
    accumulation = section.get("gradient_accumulation_steps", int, 1, check=positive(1 << 16))
    learning_rate = section.get("learning_rate", float, 5.0e-5, check=positive())
    max_grad_norm = section.get("max_grad_norm", float, TRAINER_MAX_GRAD_NORM)
    optim = section.get("optim", str, "adamw", choices=("adamw", "adafactor"))
    if optim == "adafactor":
        section.fail("optim", "adafactor is not measured by vramtune (PaddleNLP 2.8's Trainer does not implement it "
                              "either); tune with optim: adamw")
    device = section.get("device", str, "auto")
    fields = {key: arguments[key] for key in CONFIG_FIELDS if key in arguments}
    section.seen.update(fields)
    zero_padding = section.get("zero_padding", bool, False)
    intokens = section.get("intokens", bool, None)  # the deprecated name wins when given, as in the scripts
    raw: dict[str, Any] = {
        "name": Path(file).stem,
        "model": {"source": "paddlenlp", "config": model, **({"config_fields": fields} if fields else {})},
        "data": {"seq_len": seq_len, **({"zero_padding": True} if (intokens if intokens is not None else
                                                                    zero_padding) else {})},
        "train": {"target_batch": (micro or 1) * (accumulation or 1), "optimizer": "adamw",
                  "learning_rate": learning_rate,
                  **({"max_grad_norm": max_grad_norm} if max_grad_norm and max_grad_norm > 0 else {})},
        "device": device if device in ("cpu", "gpu") or (device or "").startswith("gpu:") else "auto",
        "budget": "auto",
    }
    for dotted, value in from_arguments(section).items():
        _set(raw, dotted, value)
    unknown = []
    for key, value in arguments.items():
        if key in section.seen:
            continue
        why = refusal(key, value)
        if why:
            section.fail(key, why)
        elif key not in KNOWN:
            unknown.append(key)
    if unknown:
        warnings.append(f"{file}: {', '.join(unknown)}: neither PaddleNLP 2.8.1 arguments nor vramtune's; kept "
                        "untouched (PaddleNLP's argument parser would reject them)")
    if problems:
        raise SpecError(problems)
    return raw, warnings
