"""The strategy a tool's own file states (a PaddleFormers config, a PaddleNLP arguments file, a kit's config): the
configuration `vramtune apply` would write as this very file.

It is read by round trip through apply's own writer (`export.render`), so `check` reads every key exactly as `apply`
writes it and no second mapping can drift from it. The candidates are the strategies whose fields can be listed:
the batch's factors (micro-batch x accumulation = the file's batch per rank), every value of a field with choices,
both of a switch; a count (blocks recomputed, a partitioning stage) keeps the value `measure` would give it. The first,
nearest the defaults, whose export leaves the file as it is, is the file's strategy; a key the writer leaves out
(the precision of a file checked on a CPU, which runs fp32) then reads as the default, as a probe there runs it."""
from __future__ import annotations

import difflib
import itertools
from pathlib import Path

from vramtune import export
from vramtune.mechanisms import strategy_fields
from vramtune.reading import Problem, SpecError
from vramtune.recorded_budget import without_budget_line
from vramtune.records import Budget, ProbeResult
from vramtune.report import Report
from vramtune.session import strategy_from_flags
from vramtune.spec import Spec
from vramtune.strategy import Strategy

BATCH = ("micro_batch", "accumulation")


def candidates(base: Strategy, per_rank: int) -> list[Strategy]:
    """Every listable strategy around `base`, the fewest fields away from it first (then the least accumulation)."""
    listed = []
    for field in strategy_fields():
        if field.name in BATCH:
            continue
        given = getattr(base, field.name)
        values = (False, True) if field.type is bool else (field.choices or ())
        listed.append([(field.name, value) for value in (given, *(v for v in values if v != given))])
    batches = [{"micro_batch": per_rank // k, "accumulation": k} for k in range(1, per_rank + 1) if per_rank % k == 0]
    found = [base.with_(**dict(choice), **batch) for choice in itertools.product(*listed) for batch in batches]
    return sorted(found, key=lambda s: (sum(getattr(s, f.name) != getattr(base, f.name) for f in strategy_fields()
                                            if f.name not in BATCH), s.accumulation))


def exported(spec: Spec, strategy: Strategy, device_kind: str) -> str:
    """The file `vramtune apply` would write for this strategy, measured on this kind of device."""
    report = Report(spec=spec.name, spec_path=spec.path, device_name="", device_kind=device_kind, device_bytes=0,
                    paddle_version="", budget=Budget(1, 0.0), target_batch=spec.train.target_batch,
                    chosen=ProbeResult("fits", strategy), probes=[])
    path = Path(spec.path)
    return export.render(export.default_format(path), path, spec, report)[0]


def stated_strategy(spec: Spec, device_kind: str) -> Strategy:
    """The file's own strategy, or a SpecError naming the lines that the nearest listable strategy's export changes."""
    path = Path(spec.path)
    text = without_budget_line(path.read_text(encoding="utf-8"))
    base = strategy_from_flags(spec, {"micro_batch": 1})  # the fields the spec fixes (its ranks), the rest defaults
    nearest: list[str] | None = None
    for strategy in candidates(base, spec.train.target_batch // base.devices):
        changed = _changed_lines(text, without_budget_line(exported(spec, strategy, device_kind)))
        if not changed:
            return strategy
        nearest = changed if nearest is None or len(changed) < len(nearest) else nearest
    raise SpecError([Problem(spec.path, "", (
        "check measures the strategy the file states, read as `vramtune apply` writes it, and no strategy it reads "
        f"writes this file unchanged: the nearest changes {'; '.join(nearest or [])} (a count, such as the layers "
        "recomputed or a partitioning stage, is not read yet: gate this file with `vramtune measure FILE -m M -k K ... "
        "--budget B`)"))])


def _changed_lines(text: str, written: str) -> list[str]:
    """The file's lines the written text does not keep as they are, and those it adds ("adds ...")."""
    return [line[2:].strip() if line[0] == "-" else f"adds {line[2:].strip()}"
            for line in difflib.ndiff(text.splitlines(), written.splitlines()) if line[:2] in ("- ", "+ ")]
