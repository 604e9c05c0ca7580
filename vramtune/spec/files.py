"""Spec files: any dialect's file recognised and read as a spec, command-line overrides, and the tuned: section."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vramtune.core.reading import Problem, SpecError
from vramtune.core.report import Tuned
from vramtune.dialects.base import Dialect
from vramtune.dialects.spec.tuned import outdated
from vramtune.plugins import DIALECTS
from vramtune.spec.schema import Spec, spec_from_dict

OPTIONS_ELSEWHERE = ("KEY=VALUE overrides / -O apply to PaddleFormers and kit configs only; for a vramtune spec or "
                     "a PaddleNLP arguments file use the flags (--target-batch, --budget, --device, --devices, ...) "
                     "or edit the file")


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
    """Read and validate one spec file (any dialect's: vramtune's own YAML, a PaddleNLP arguments JSON, a
    PaddleFormers or a kit's config), with command-line overrides applied first. The batch a tool's file carries is
    per rank: with N devices (--devices or the file's own degree) the target batch is N times it. `read_data` False:
    no pass over training data (a PaddleFormers config's runs Paddle), for `validate`."""
    overrides = overrides or {}
    dialect = dialect_of(Path(path))
    reading = dialect.read(Path(path), overrides.get("kit.options") or [], read_data)
    raw = reading.raw
    if dialect.per_rank_batch:
        overrides = _per_rank_batch(raw, overrides)
    if not dialect.takes_options and overrides.get("kit.options"):
        raise SpecError([Problem(str(path), "", OPTIONS_ELSEWHERE)])
    overrides = {key: value for key, value in overrides.items() if key != "kit.options"}
    if overrides and isinstance(raw, dict):
        raw = apply_overrides(raw, overrides)
    spec = spec_from_dict(raw, str(path))
    spec.arguments, spec.warnings, spec.dialect = reading.arguments, reading.warnings, dialect.name
    return spec


def dialect_of(path: Path) -> Dialect:
    """The dialect whose file this is (vramtune's own spec when no tool's dialect recognises it)."""
    return next(dialect for dialect in DIALECTS if dialect.recognises(path))


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
    refused = outdated(spec.tuned)
    if refused:
        raise SpecError([Problem(spec.path, "tuned", why) for why in refused])
    try:
        return Tuned.from_json(spec.tuned)
    except (KeyError, TypeError, ValueError) as error:
        raise SpecError([Problem(spec.path, "tuned", f"is incomplete or damaged ({error}); rerun vramtune apply")]) \
            from None
