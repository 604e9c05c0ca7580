"""The registry of memory mechanisms, in ladder order. Adding one: its module, its tests, one line here."""
from __future__ import annotations

from vramtune.mechanisms import accumulation, data_parallel, precision, recompute, sharding, static_graph
from vramtune.mechanisms.base import Field, Mechanism, Option

MECHANISMS: tuple[Mechanism, ...] = (precision.MECHANISM, accumulation.MECHANISM, recompute.MECHANISM,
                                     data_parallel.MECHANISM, sharding.MECHANISM, static_graph.MECHANISM)
BY_NAME = {mechanism.name: mechanism for mechanism in MECHANISMS}


def strategy_fields() -> list[Field]:
    return [field for mechanism in MECHANISMS for field in mechanism.fields]


__all__ = ["BY_NAME", "MECHANISMS", "Field", "Mechanism", "Option", "strategy_fields"]
