"""The oracle each dialect's reading of its own file is tested against (tests/formers/test_stated.py,
tests/fast/test_arguments.py, tests/kits/test_kit_stated.py): the round trip through `vramtune apply`'s own writer.
The candidates are the strategies whose fields can be listed (the batch's factors, every value of a field with
choices, both of a switch; a count, the values a file may state for the model: a PaddleFormers model folder's
config.json gives the layers recomputed; every sharding stage), rendered by `export.render` with the facts a probe
would record; the first, nearest the defaults, whose export says what the file says (key by key: comments and layout
aside) is the file's strategy. It was vramtune's own reading until each dialect read its keys itself (issue 35);
it stays here as the independent check that the reading is the writer's inverse."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from vramtune import export
from vramtune.core.reading import Problem, SpecError
from vramtune.core.records import Budget, ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import FIELDS, SHARDING_STAGES, Strategy
from vramtune.dialects import yaml_file as tags
from vramtune.dialects.paddleformers.codec import file_counts, model_depth
from vramtune.plugins import SOURCES
from vramtune.spec import Spec
from vramtune.tuning.session import strategy_from_flags

BATCH = ("micro_batch", "accumulation")
ADDED = " (added)"


def batches(per_rank: int) -> list[dict[str, int]]:
    """Every micro-batch x accumulation of the batch per rank, the least accumulation first."""
    return [{"micro_batch": per_rank // k, "accumulation": k} for k in range(1, per_rank + 1) if per_rank % k == 0]


def model_counts(spec: Spec) -> tuple[dict[str, Any], dict[str, tuple[Any, ...]]]:
    """The facts about the file's model and the count values a file may state for it: a PaddleFormers file's, told
    the depth (as a probe counts it, num_hidden_layers) and model_type of the config.json in its model folder
    (`file_counts`); another tool's, every sharding stage (the file's ranks are its degree: its writer tells the
    stages apart)."""
    shape = SOURCES[spec.source].model_shape(spec.model)
    if shape is None:
        return {}, {"sharding_stage": SHARDING_STAGES[1:]}
    return file_counts(*model_depth(shape[0]))


def candidates(base: Strategy, ordered: list[dict[str, int]], counts: dict[str, tuple[Any, ...]]) -> list[Strategy]:
    """Every listable strategy around `base` at these batches (a count: the values `counts` gives it): the fewest
    fields away from it first, then in the batches' order."""
    listed = []
    for field in FIELDS.values():
        if field.name in BATCH:
            continue
        given = getattr(base, field.name)
        values = (False, True) if field.type is bool else (counts.get(field.name) or field.choices or ())
        listed.append([(field.name, value) for value in (given, *(v for v in values if v != given))])
    found = [(sum(value != getattr(base, name) for name, value in choice), place, base.with_(**dict(choice), **batch))
             for choice in itertools.product(*listed) for place, batch in enumerate(ordered)]
    return [strategy for *_, strategy in sorted(found, key=lambda item: item[:2])]


def exported(spec: Spec, strategy: Strategy, device_kind: str, format_name: str,
             facts: dict[str, dict[str, Any]]) -> str:
    """The file `vramtune apply` would write for this strategy, measured on this kind of device with these facts."""
    report = Report(spec=spec.name, spec_path=spec.path, device_name="", device_kind=device_kind, device_bytes=0,
                    paddle_version="", budget=Budget(1, 0.0), target_batch=spec.train.target_batch,
                    chosen=ProbeResult("fits", strategy, facts=facts), probes=[])
    return export.render(format_name, Path(spec.path), spec, report)[0]


def written_as(spec: Spec, device_kind: str) -> Strategy:
    """The strategy whose export writes the file unchanged, or a SpecError naming the keys the nearest listable
    strategy's export changes. The batches are tried nearest the file's first (fewest keys changed with the rest at
    `base`): a kit's YAML takes a tenth of a second a reading, and a render reads it twice."""
    path = Path(spec.path)
    parse = json.loads if path.suffix == ".json" else tags.safe_load  # a JSON file may be indented with tabs
    data, format_name = flat(parse(path.read_text(encoding="utf-8"))), export.default_format(path)
    read: dict[str, dict[str, Any]] = {}  # an export's text -> its keys (strategies alike for the format write alike)
    facts, counts = model_counts(spec)

    def changed(strategy: Strategy) -> list[str]:
        text = exported(spec, strategy, device_kind, format_name, facts)
        if text not in read:
            read[text] = flat(parse(text))
        return changed_keys(data, read[text])

    base = strategy_from_flags(spec, {"micro_batch": 1})  # the fields the spec fixes (its ranks), the rest defaults
    ordered = sorted(batches(spec.train.target_batch // base.devices), key=lambda b: len(changed(base.with_(**b))))
    nearest: list[str] | None = None
    for strategy in candidates(base, ordered, counts):
        differences = changed(strategy)
        if not differences:
            return strategy
        nearest = min(nearest or differences, differences, key=_distance)
    raise SpecError([Problem(spec.path, "", (
        "check measures the strategy the file states, read as `vramtune apply` writes it, and no strategy it reads "
        f"writes this file unchanged; the nearest would change {'; '.join(nearest or [])} (a count no mechanism lists "
        "for the file's model, such as the layers an arguments file recomputes, is not read yet: gate this file with "
        "`vramtune measure FILE -m M -k K ... --budget B`)"))])


def _distance(differences: list[str]) -> tuple[int, int]:
    """The fewest keys changed, and of those the most only added (a key the file leaves to its parser's default)."""
    return len(differences), sum(not word.endswith(ADDED) for word in differences)


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """A parsed file as dotted keys (mappings opened, any other value whole)."""
    if not isinstance(data, dict):
        return {prefix: data}
    return {key: value for name, inner in data.items() for key, value in flat(inner, f"{prefix}{name}.").items()} \
        if data else {prefix: data}


def changed_keys(data: dict[str, Any], written: dict[str, Any]) -> list[str]:
    """What the written file says otherwise than the file, key by key (a comment or a layout is no change)."""
    words = []
    for key in [*data, *(key for key in written if key not in data)]:
        name = key.rstrip(".")
        if key not in written:
            words.append(f"{name}: {data[key]!r} (removed)")
        elif key not in data:
            words.append(f"{name}: {written[key]!r}{ADDED}")
        elif written[key] != data[key]:
            words.append(f"{name}: {data[key]!r} -> {written[key]!r}")
    return words
