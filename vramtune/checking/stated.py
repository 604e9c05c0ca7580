"""The strategy a tool's own file states (a PaddleFormers config, a PaddleNLP arguments file, a kit's config): as its
dialect reads it from its keys (`Dialect.stated`: each the inverse of what `vramtune apply` writes there; each
dialect's tests hold it to the round trip through the writer, tests/round_trip.py)."""
from __future__ import annotations

from vramtune.core.spec import Spec
from vramtune.core.strategy import Strategy
from vramtune.plugins import DIALECTS


def stated_strategy(spec: Spec, device_kind: str) -> Strategy:
    """The file's own strategy, as a probe on this kind of device runs it (SpecError naming what it cannot read)."""
    dialect = next(dialect for dialect in DIALECTS if dialect.name == spec.dialect)
    assert dialect.stated is not None, f"{dialect.name} files carry a tuned: section, not a stated strategy"
    return dialect.stated(spec, device_kind)
