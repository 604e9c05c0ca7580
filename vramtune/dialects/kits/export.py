"""`--format kit` (the default for a kit's config): the user's own config with only the tuned keys changed, every
comment, the key order and the anchors kept (an anchored batch moves its aliases), the budget recorded in a comment
for `vramtune check` (recorded_budget.py), and the command that trains it."""
from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import yaml

from vramtune.core.report import Report, Tuned
from vramtune.dialects import yaml_file as tags
from vramtune.dialects.recorded import with_budget_line
from vramtune.dialects.roundtrip import set_keys

NAME, SUFFIX = "kit", ".tuned.yml"
ACCEPTED = None  # the search explores only what the kit's config can say (spec(): recompute and sharding off)
# the kits' model sources: the specs this format writes back
SOURCES = ("paddleclas", "paddleocr", "paddleseg", "paddledetection")


def is_kit_config(path: Path) -> bool:
    """Whether the file is a kit's training config (read leniently: a broken file is reported by the reader)."""
    from vramtune.dialects.kits import kit_of

    try:
        return kit_of(tags.safe_load(path.read_text(encoding="utf-8"))) is not None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False


def leaf_keys(changes: dict[str, Any]) -> set[str]:
    """The dotted keys the changes set. A mapping written where the file had none (`TrainReader: {batch_size: 4}`)
    sets its own keys only: a kit merges it over its base files and the -o overrides over the file key by key, so an
    override of a key the mapping lacks (TrainReader.sample_transforms) still applies to the tuned file."""
    return {leaf for key, value in changes.items()
            for leaf in ({f"{key}.{inner}" for inner in leaf_keys(value)} if isinstance(value, dict) and value
                         else {key})}


def is_tuned(option: str, keys: set[str]) -> bool:
    """Whether a -o Key=value override sets a tuned key (leaf_keys) or a key inside one."""
    key = option.partition("=")[0]
    return any(key == tuned or key.startswith(f"{tuned}.") for tuned in keys)


def command(kit: Any, spec: Any, changed: set[str], tuned_file: str) -> str:
    """How to train the tuned file: the kit's tools/train.py, with the user's -o options that are not tuned keys."""
    options = [option for option in spec.model.options if not is_tuned(option, changed)]
    return (f"cd {shlex.quote(spec.model.checkout)} && python tools/train.py {kit.config_flag} "
            f"{shlex.quote(tuned_file)}{kit.command_options(options)}")


def prefer(spec: Any, report: Report) -> tuple[Report, list[str]]:
    """For a kit that cannot accumulate (PaddleOCR): the largest batch measured to fit at the chosen precision, since
    a smaller one is a smaller effective batch there, whatever its speed in the accumulating probe."""
    from vramtune.dialects.kits import KITS

    chosen = report.chosen
    if chosen is None or KITS[spec.source].accumulates:
        return report, []
    same = [probe for probe in report.probes if probe.fits and probe.strategy.with_(
        micro_batch=chosen.strategy.micro_batch, accumulation=chosen.strategy.accumulation) == chosen.strategy]
    largest = max(same, key=lambda probe: probe.strategy.micro_batch, default=chosen)
    if largest.strategy.micro_batch <= chosen.strategy.micro_batch:
        return report, []
    return dataclasses.replace(report, chosen=largest), [
        f"exported batch {largest.strategy.micro_batch} (measured to fit) instead of the chosen "
        f"{chosen.label()}: the kit cannot accumulate, so the largest batch that fits keeps its effective batch "
        "closest to the config's"]


def render(spec_path: Path, spec: Any, report: Report, tuned_file: str) -> tuple[str, list[str]]:
    from vramtune.dialects.kits import KITS

    kit, text = KITS[spec.source], Path(spec.model.config).read_text(encoding="utf-8")
    changes, warnings = kit.changes(tags.safe_load(text), Tuned.of(report))
    tuned, followers = set_keys(text, changes, "yaml")
    if followers:
        warnings.append(f"{', '.join(followers)} changed too: they alias an anchored key that was tuned")
    tuned_keys = leaf_keys(changes) | set(followers)
    overridden = [option for option in spec.model.options if is_tuned(option, tuned_keys)]
    if overridden:
        flag = kit.option_flag
        warnings.append(f"{flag} {f' {flag} '.join(overridden)}: tuned in the file now; do not pass them to the kit "
                        "again")
    warnings.append("train the tuned file with the kit: " + command(kit, spec, tuned_keys, tuned_file))
    kept = [option for option in spec.model.options if not is_tuned(option, tuned_keys)]
    return with_budget_line(tuned, report.budget.bytes, kept), warnings


def estimate_options(spec: Any, strategy: Any) -> tuple[list[str], list[str]]:
    """`estimate`'s predicted best as the kit's own -o Key=value overrides (what `apply` would change in the file;
    the evaluation batch is not estimated), and what the user must know (PaddleOCR: the smaller batch's learning
    rate)."""
    from vramtune.dialects.kits import KITS

    kit, raw = KITS[spec.source], tags.safe_load(Path(spec.model.config).read_text(encoding="utf-8"))
    changes, warnings = kit.changes(raw, Tuned(strategy=strategy))
    return [f"{key}={kit.option_text(value)}" for key, value in changes.items()], warnings
