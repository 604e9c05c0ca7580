"""Spec files: YAML reading with located syntax errors, command-line overrides, and the tuned: section."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vramtune.core.reading import Problem, SpecError, read_spec_text
from vramtune.core.report import Tuned
from vramtune.dialects.kits import kit_of, kit_spec, tags
from vramtune.dialects.paddleformers.reading import formers_spec
from vramtune.dialects.paddlenlp.reading import read_arguments, spec_from_arguments
from vramtune.plugins import MECHANISMS
from vramtune.spec.schema import Spec, spec_from_dict

OPTIONS_ELSEWHERE = ("KEY=VALUE overrides / -O apply to PaddleFormers and kit configs only; for a vramtune spec or "
                     "a PaddleNLP arguments file use the flags (--target-batch, --budget, --device, --devices, ...) "
                     "or edit the file")


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing file or a syntax error becomes a SpecError with the line."""
    file = str(path)
    text = read_spec_text(Path(path))
    try:
        raw = tags.safe_load(text)  # a kit's `!Class` tags (PaddleDetection) read as mappings
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError([Problem(file, "", f"{where}YAML syntax error: {problem}")]) from None
    if raw is None:
        raise SpecError([Problem(file, "", "is empty")])
    return raw


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (e.g. 'train.target_batch') on a copy of a raw spec; None values are skipped."""
    result = yaml.safe_load(yaml.safe_dump(raw))
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = result
        *parents, last = dotted.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value
    return result


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None, read_data: bool = True) -> Spec:
    """Read and validate one spec file (YAML, a PaddleNLP arguments JSON, a PaddleFormers or a kit's config), with
    command-line overrides applied first. The batch those three files carry is per rank: with N devices (--devices
    or the file's own degree) the target batch is N times it. `read_data` False: no pass over training data (a
    PaddleFormers config's runs Paddle), for `validate`."""
    arguments, warnings, kit = None, [], None
    overrides = overrides or {}
    formers = formers_spec(Path(path), overrides.get("kit.options"), read_data)
    if formers is not None:  # a PaddleFormers 1.x config (YAML or JSON), recognised by its keys
        raw, warnings = formers
        overrides = _per_rank_batch(raw, overrides)
    elif Path(path).suffix == ".json":
        arguments = read_arguments(Path(path))
        raw, warnings = spec_from_arguments(arguments, str(path))
        overrides = _per_rank_batch(raw, overrides)
    else:
        raw = read_yaml(path)
        kit = kit_of(raw)
        if kit is not None:  # a kit's training config, its -o options given as `kit.options`
            raw, warnings = kit_spec(kit, raw, Path(path), overrides.get("kit.options") or [])
            overrides = _per_rank_batch(raw, overrides)
    if formers is None and kit is None and overrides.get("kit.options"):
        raise SpecError([Problem(str(path), "", OPTIONS_ELSEWHERE)])
    overrides = {key: value for key, value in overrides.items() if key != "kit.options"}
    if overrides and isinstance(raw, dict):
        raw = apply_overrides(raw, overrides)
    spec = spec_from_dict(raw, str(path))
    spec.arguments, spec.warnings = arguments, warnings
    return spec


def _per_rank_batch(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides with the target batch set to the file's per-rank batch x the ranks, unless one is given."""
    devices = overrides.get("devices") or raw.get("devices")
    if not devices or devices < 2 or overrides.get("train.target_batch") is not None:
        return overrides
    return {**overrides, "train.target_batch": raw["train"]["target_batch"] * devices}


MISSING_TUNED = ("is missing: `vramtune apply SPEC.yaml` writes it into SPEC.tuned.yaml (a vramtune spec): give that "
                 "file; a PaddleFormers, PaddleNLP or kit file has no tuned: section and is checked as it is: "
                 "`vramtune check FILE --budget B` (exit 1 when it no longer fits)")


def require_tuned(spec: Spec) -> Tuned:
    """The `tuned:` section written by `vramtune apply`, or a SpecError saying how to get one."""
    if not spec.tuned:
        raise SpecError([Problem(spec.path, "tuned", MISSING_TUNED)])
    outdated = [why for mechanism in MECHANISMS if (why := mechanism.outdated(spec.tuned))]
    if outdated:
        raise SpecError([Problem(spec.path, "tuned", why) for why in outdated])
    try:
        return Tuned.from_json(spec.tuned)
    except (KeyError, TypeError, ValueError) as error:
        raise SpecError([Problem(spec.path, "tuned", f"is incomplete or damaged ({error}); rerun vramtune apply")]) \
            from None
