"""`--format paddlenlp`: PaddleNLP TrainingArguments JSON for a Trainer script of the user's own, the codec mapping
the tuned values (codec.py). Only TrainingArguments keys are written (PdArgumentParser refuses any other key); a tuned
value that is not one goes to stderr and the report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.core.report import Report, Tuned
from vramtune.dialects.paddlenlp.codec import ARGUMENT_DEFAULTS, to_arguments
from vramtune.dialects.paddlenlp.keys import TRAINING_ARGUMENTS

NAME, SUFFIX = "paddlenlp", ".tuned.json"
ACCEPTED = frozenset(TRAINING_ARGUMENTS)  # PdArgumentParser(TrainingArguments)'s fields


def tuned_arguments(tuned: Tuned, optimizer: str) -> tuple[dict[str, Any], list[str]]:
    """The PaddleNLP keys the tuning decides (TrainingArguments and llm-script ModelArgument keys), and warnings
    for what does not map exactly."""
    mapped, warnings = to_arguments(tuned)
    arguments: dict[str, Any] = {"do_train": True, **mapped, "optim": "adamw"}
    if optimizer not in ("adamw", "adam"):
        warnings.append(f"PaddleNLP's Trainer trains with AdamW (optim: adamw); this configuration was measured with "
                        f"{optimizer}, which keeps less optimizer state: tune with train.optimizer: adamw for the "
                        "Trainer, or it may not fit")
    if tuned.device_kind == "cpu":
        arguments["device"] = "cpu"
    return arguments, warnings


def accepted_only(arguments: dict[str, Any], accepted: frozenset[str], parser: str) -> tuple[dict[str, Any],
                                                                                          list[str]]:
    """The keys the parser reads; the others are left out (a value a parser without the key leaves anyway
    silently, any other with a warning naming it)."""
    kept = {key: value for key, value in arguments.items() if key in accepted}
    left = {key: value for key, value in arguments.items()
            if key not in accepted and (key not in ARGUMENT_DEFAULTS or ARGUMENT_DEFAULTS[key] != value)}
    if not left:
        return kept, []
    said = ", ".join(f"{key}: {json.dumps(value)}" for key, value in left.items())
    return kept, [f"not in the file, since {parser} does not read them: {said} (measured so; PaddleNLP's llm scripts "
                  "read them as model arguments: in a script of your own, apply them to the model as measured)"]


def paddlenlp_arguments(spec_name: str, tuned: Tuned, learning_rate: float,
                        optimizer: str = "adamw") -> tuple[dict, list[str]]:
    """PaddleNLP TrainingArguments fields for a choice, and warnings for what they do not say."""
    arguments: dict[str, Any] = {"output_dir": f"./checkpoints/{spec_name}", "learning_rate": learning_rate}
    tuned_keys, warnings = tuned_arguments(tuned, optimizer)
    kept, left_out = accepted_only({**arguments, **tuned_keys}, ACCEPTED, "PdArgumentParser(TrainingArguments)")
    return kept, warnings + left_out


def render(spec_path: Path, spec: Any, report: Report, tuned_file: str) -> tuple[str, list[str]]:
    arguments, warnings = paddlenlp_arguments(spec.name, Tuned.of(report), spec.train.learning_rate,
                                              spec.train.optimizer)
    return json.dumps(arguments, indent=2) + "\n", warnings
