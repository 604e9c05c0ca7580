"""`--format paddleformers` (the default for a PaddleFormers config): the user's own YAML or JSON file back, with only
the tuned keys' values changed (comments, order and quoting kept by roundtrip.py).

Written: the tuned values in this tool's keys (codec.py's `to_formers`): the batch and its accumulation, recompute
only as the combination PaddleFormers' models honour (every layer), and on a GPU the precision chosen. A YAML file
records the budget in a comment (recorded_budget.py) for `vramtune check`. A probe on CPU measures CPU equivalents
of GPU-only settings (compute_type, attention, fused kernels, sharding); they are never written: the file out is
still the user's file for their GPU.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from vramtune.core.report import Report, Tuned
from vramtune.dialects.paddleformers.codec import to_formers
from vramtune.dialects.paddleformers.reading import formers_data, read_config
from vramtune.dialects.recorded import with_budget_line
from vramtune.dialects.roundtrip import DELETE, set_keys, value_text

NAME, SUFFIX = "paddleformers", ".tuned"
ACCEPTED = None  # the search explores only what the file can say (recompute every layer or none; no to_static)


def tuned_keys(config: dict[str, Any], tuned: Tuned) -> dict[str, Any]:
    """The keys the choice changes, and their new values (DELETE removes a key)."""
    changes = to_formers(config, tuned)
    return {key: value for key, value in changes.items() if value is DELETE or config.get(key) != value}


def render(spec_path: Path, spec: Any, report: Report, tuned_file: str) -> tuple[str, list[str]]:
    config, tuned = read_config(spec_path), Tuned.of(report)
    changes = tuned_keys(config, tuned)
    kept, overriding = given_overrides(config, spec.model.arguments, {*tuned_keys({}, tuned), *changes})
    text = spec_path.read_text(encoding="utf-8")
    if spec_path.suffix == ".json":  # JSON has no comments: `check` takes --budget
        text, _ = set_keys(text, changes, "json")
    else:
        text = with_budget_line(set_keys(text, changes, "yaml")[0], report.budget.bytes, kept)
    return text, command_warnings(kept, overriding, tuned_file)


def given_overrides(config: dict[str, Any], arguments: dict[str, Any], tuned: set[str]) -> tuple[list[str], list[str]]:
    """The key=value overrides given after the file (`arguments`: the file's keys with them), as YAML text: the ones
    that set no tuned key, and the ones that do."""
    overrides = {key: value for key, value in arguments.items() if key not in config or config[key] != value}
    given = [f"{key}={'' if value is None else value_text(value)}" for key, value in overrides.items()]  # YAML
    return ([item for item, key in zip(given, overrides) if key not in tuned],
            [item for item, key in zip(given, overrides) if key in tuned])


def command_warnings(kept: list[str], overriding: list[str], tuned_file: str) -> list[str]:
    """With overrides given after the file: the ones that set a tuned key (they would override the tuned value), and
    the command that trains the tuned file with the others."""
    if not kept and not overriding:
        return []
    warnings = [f"{' '.join(overriding)}: tuned in the file now; passing them again would override the tuned "
                "value"] if overriding else []
    return [*warnings, "train the tuned file with: " + shlex.join(["paddleformers-cli", "train", tuned_file, *kept])]


def output_name(spec_path: Path) -> str:
    """sft.yaml -> sft.tuned.yaml: PaddleFormers picks the parser by the suffix, which must stay."""
    return f"{spec_path.stem}{SUFFIX}{spec_path.suffix}"


def is_formers_file(spec_path: Path) -> bool:
    """Whether `apply` writes this file back as a PaddleFormers config."""
    return formers_data(spec_path) is not None
