"""What `vramtune estimate` is asked when it is given a model rather than a spec to probe: a model folder or its
config.json (sizes only), or a PaddleFormers 1.x config naming a local model folder, read by the PaddleFormers
dialect (vramtune/dialects/paddleformers: its keys checked against PaddleFormers' parser, the sequence length the
run reaches). Of the keys the probes refuse because they cannot be measured, the parallel ones (tensor, pipeline,
expert, sequence parallelism) state the layout whose per-rank and per-stage peak the estimate predicts
(dialects/paddleformers/layout.py); the others (quantized weights, offloading, FP8...) are not modelled, and the
estimate names them. Anything else is a spec, estimated from CPU probes (spec_estimate.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from vramtune.core.reading import Problem, SpecError
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.codec import FORMERS_DEFAULTS
from vramtune.dialects.paddleformers.layout import LAYOUT_KEYS, stated_layout, states_layout
from vramtune.dialects.paddleformers.reading import formers_data, parse_overrides, spec_from_config
from vramtune.estimating.answer import Question
from vramtune.estimating.vl import default_images
from vramtune.memory.architecture import ArchitectureError, architecture, read_config
from vramtune.memory.vision import is_vision_language, vision_language


def is_model_config(path: Path) -> bool:
    """A config.json of a model (its sizes), not an arguments file naming one."""
    if path.suffix != ".json":
        return False
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # the spec reader names what is wrong with it
    return isinstance(data, dict) and "model_type" in data and "hidden_size" in data \
        and "model_name_or_path" not in data


def _config(path: Path) -> dict[str, Any]:
    """The model's config.json, checked: the sizes it needs are there."""
    try:
        config = read_config(path)
        if is_vision_language(config):
            vision_language(config)
        else:
            architecture(config)
    except ArchitectureError as error:
        raise SpecError([Problem(str(path / "config.json" if path.is_dir() else path), "", str(error))]) from None
    return config


def _lora_rank(file: str, data: dict[str, Any]) -> int:
    rank = data.get("lora_rank", 8)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise SpecError([Problem(file, "lora_rank", f"must be a positive integer, got {rank!r}")])
    return rank


def _formers_question(path: Path, data: dict[str, Any], seq_len: int | None, batch: int | None,
                      devices: int | None) -> Question:
    file = str(path)
    refused = {key: value for key, value in data.items() if keys.refusal(key, value)}
    default = FORMERS_DEFAULTS["compute_type"]
    compute_type = data.get("compute_type", default)
    quantized = compute_type in keys.QUANTIZED_TYPES
    readable = {k: v for k, v in data.items() if k not in refused}
    raw, _ = spec_from_config({**readable, "compute_type": default} if quantized else readable, file)
    folder = Path(raw["model"]["folder"])
    notes = [f"{key}: {value!r} is not modelled: the figures are without it" for key, value in refused.items()
             if key not in LAYOUT_KEYS]
    layout = stated_layout(data, devices) if states_layout(data) else None
    if layout and devices and devices % (layout.mp * layout.pp):
        raise SpecError([Problem(file, "--devices", f"{devices} devices: the file's tensor x pipeline parallel "
                                 f"degrees ({layout.mp} x {layout.pp}) do not divide them")])
    if quantized:
        notes.append(f"compute_type: {compute_type!r} quantizes the weights: not modelled, the figures are "
                     f"{default}'s")
        compute_type = default
    if raw["data"].get("seq_note") and not seq_len:
        notes.insert(0, raw["data"]["seq_note"])
    elif not seq_len:
        notes.insert(0, f"sequence length {raw['data']['seq_len']}: max_seq_len, an upper bound (without packing a "
                        "batch is padded to its longest row; the training data was not read)")
    config = _config(folder)
    if layout and layout.ep > 1 and not architecture(config).moe:
        notes.append(f"expert_model_parallel_size: {layout.ep}: the model has no experts, read as 1")
        layout = replace(layout, ep=1)
    images = None
    if is_vision_language(config):
        images = default_images(str(config["model_type"]), folder, bool(data.get("packing")),
                                str(data.get("freeze_config") or ""))
        notes += _reach(data)
    return Question(folder.name, config, seq_len=seq_len or raw["data"]["seq_len"],
                    batch=batch or raw["train"]["target_batch"],
                    fine_tuning="LoRA" if str(data.get("fine_tuning", "LoRA")).lower() == "lora" else "full",
                    lora_rank=_lora_rank(file, data), compute_type=compute_type,
                    master_grad=bool(data.get("amp_master_grad", FORMERS_DEFAULTS["amp_master_grad"])),
                    attention=str(data.get("_attn_implementation", "flashmask")),
                    devices=devices or (layout.devices if layout else 1), notes=notes, layout=layout, images=images)


def _reach(data: dict[str, Any]) -> list[str]:
    """What the VL workflow does not get of the file's keys, and what VL-DPO's estimate leaves out."""
    notes = keys.unreached(data)
    if data.get("stage") == "VL-DPO":
        notes.append("VL-DPO: estimated as VL-SFT of the chosen row (DPO's reference model and the rejected row are "
                     "not modelled)")
    return notes


def question(path: Path, seq_len: int | None, batch: int | None, devices: int | None,
             options: list[str] | None = None) -> Question | None:
    """The question a model folder, a config.json or a PaddleFormers config (with its key=value `options`, as
    PaddleFormers merges them) asks; None for a spec."""
    if path.is_dir() or is_model_config(path):
        if options:
            raise SpecError([Problem(str(path), "", "key=value overrides apply to a config of a tool (PaddleFormers, "
                                     "a kit); a model folder or config.json is estimated from its sizes: --seq-len "
                                     "and --batch give the run")])
        folder = (path if path.is_dir() else path.parent).resolve()
        config = _config(path)
        images = default_images(str(config["model_type"]), folder) if is_vision_language(config) else None
        return Question(folder.name, config, seq_len=seq_len or 4096, batch=batch or 8, devices=devices or 1,
                        images=images)
    data = formers_data(path) if path.is_file() else None
    if data is None:
        return None
    return _formers_question(path, {**data, **parse_overrides(options or [], str(path))}, seq_len, batch, devices)
