"""What `vramtune estimate` is asked when it is given a model rather than a spec: a model folder or its config.json
(sizes only), or a PaddleFormers 1.x config naming a local model folder (its keys that decide memory read with
PaddleFormers' defaults). Anything else is a spec, estimated from CPU probes (run.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vramtune.estimating.answer import Question
from vramtune.estimating.architecture import ArchitectureError, architecture, read_config
from vramtune.reading import Problem, SpecError

FORMERS_MARKERS = ("stage", "max_seq_len", "fine_tuning", "compute_type", "_attn_implementation")
COMPUTE_TYPES = ("bf16", "fp16")  # PaddleFormers' others quantize the weights (wint4, wint8): not estimated


def _load(path: Path) -> Any:
    if path.suffix not in (".json", ".yaml", ".yml"):
        return None
    try:
        return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None  # the spec reader names what is wrong with it


def is_model_config(data: Any) -> bool:
    return isinstance(data, dict) and "model_type" in data and "hidden_size" in data \
        and "model_name_or_path" not in data


def _typed(file: str, data: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = data.get(key, default)
    positive_int = isinstance(value, int) and not isinstance(value, bool) and value > 0
    if not (positive_int if kind is int else isinstance(value, kind)):
        raise SpecError([Problem(file, key, f"must be {'a positive integer' if kind is int else kind.__name__}, "
                                            f"got {value!r}")])
    return value


def _model_folder(path: Path, data: dict[str, Any]) -> Path:
    name = data.get("model_name_or_path")
    if not isinstance(name, str) or not name:
        raise SpecError([Problem(str(path), "model_name_or_path", "is required (a local model folder)")])
    for folder in (path.parent / name, Path(name)):
        if (folder / "config.json").is_file():
            return folder
    raise SpecError([Problem(str(path), "model_name_or_path", f"{name}: no local folder with a config.json "
                                        "(estimate reads the model's sizes from it; it downloads nothing)")])


def _config(path: Path) -> dict[str, Any]:
    """The model's config.json, checked: the sizes it needs are there."""
    try:
        config = read_config(path)
        architecture(config)
    except ArchitectureError as error:
        raise SpecError([Problem(str(path / "config.json" if path.is_dir() else path), "", str(error))]) from None
    return config


def question(path: Path, seq_len: int | None, batch: int | None, devices: int | None) -> Question | None:
    """The question a model folder, a config.json or a PaddleFormers config asks; None for a spec."""
    data = None if path.is_dir() else _load(path)
    if path.is_dir() or is_model_config(data):
        name = (path if path.is_dir() else path.parent).resolve().name
        return Question(name, _config(path), seq_len=seq_len or 4096, batch=batch or 8, devices=devices or 1)
    if not (isinstance(data, dict) and any(key in data for key in FORMERS_MARKERS)):
        return None
    file = str(path)
    folder = _model_folder(path, data)
    compute_type = _typed(file, data, "compute_type", str, "bf16")
    if compute_type not in COMPUTE_TYPES:
        raise SpecError([Problem(file, "compute_type", f"{compute_type!r}: only bf16 and fp16 are estimated "
                                                       "(weight-quantized training is not)")])
    per_device = _typed(file, data, "per_device_train_batch_size", int, 8)
    accumulation = _typed(file, data, "gradient_accumulation_steps", int, 1)
    fine_tuning = "LoRA" if str(_typed(file, data, "fine_tuning", str, "LoRA")).lower() == "lora" else "full"
    return Question(folder.resolve().name, _config(folder), seq_len=seq_len or _typed(file, data, "max_seq_len", int,
                                                                                       4096),
                    batch=batch or per_device * accumulation, fine_tuning=fine_tuning,
                    lora_rank=_typed(file, data, "lora_rank", int, 8), compute_type=compute_type,
                    master_grad=_typed(file, data, "amp_master_grad", bool, True),
                    attention=_typed(file, data, "_attn_implementation", str, "flashmask"),
                    devices=devices or 1, packing=bool(data.get("packing")))
