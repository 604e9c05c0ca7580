"""`--format paddlenlp`: PaddleNLP TrainingArguments JSON, each mechanism mapping its own fields."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.mechanisms import MECHANISMS
from vramtune.report import Report, Tuned

NAME, SUFFIX = "paddlenlp", ".tuned.json"


def tuned_arguments(tuned: Tuned, optimizer: str) -> tuple[dict[str, Any], list[str]]:
    """The arguments the tuning decides, and warnings for what does not map exactly."""
    arguments: dict[str, Any] = {"do_train": True}
    warnings: list[str] = []
    for mechanism in MECHANISMS:
        mapped, more = mechanism.to_arguments(tuned)
        arguments.update(mapped)
        warnings.extend(more)
    arguments["optim"] = "adamw"
    if optimizer not in ("adamw", "adam"):
        warnings.append(f"PaddleNLP's Trainer trains with AdamW (optim: adamw); this configuration was measured with "
                        f"{optimizer}, which keeps less optimizer state: tune with train.optimizer: adamw for the "
                        "Trainer, or it may not fit")
    if tuned.device_kind == "cpu":
        arguments["device"] = "cpu"
    if "recompute_granularity" in arguments:
        warnings.append("recompute_granularity / no_recompute_layers are model arguments of PaddleNLP's llm scripts "
                        "(ModelArgument); with a Trainer script of your own, set them on the model's config before "
                        "building the model")
    return arguments, warnings


def paddlenlp_arguments(spec_name: str, tuned: Tuned, learning_rate: float,
                        optimizer: str = "adamw") -> tuple[dict, list[str]]:
    """PaddleNLP TrainingArguments fields for a YAML spec's choice, and warnings for what does not map."""
    arguments: dict[str, Any] = {"output_dir": f"./checkpoints/{spec_name}", "learning_rate": learning_rate}
    tuned_keys, warnings = tuned_arguments(tuned, optimizer)
    arguments.update(tuned_keys)
    if warnings:
        arguments["_vramtune_comment"] = " ".join(warnings)
    return arguments, warnings


def render(spec_path: Path, spec: Any, report: Report) -> tuple[str, list[str]]:
    arguments, warnings = paddlenlp_arguments(spec.name, Tuned.of(report), spec.train.learning_rate,
                                              spec.train.optimizer)
    return json.dumps(arguments, indent=2) + "\n", warnings
