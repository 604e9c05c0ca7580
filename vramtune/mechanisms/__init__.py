"""The registry of memory mechanisms. Its order is the order of application: the child applies each hook
(configure, prepare_model, prepare_training, forward contexts, the loss scaler) mechanism by mechanism in this
order, so AMP O2's decorate wraps before data parallel and sharding, as PaddleNLP's Trainer does, and to_static
compiles last; labels and the tie rule follow it too. Adding one: its module, its tests, one line here (and,
if the search explores it, its role in search/roles.py)."""
from __future__ import annotations

from typing import Any

from vramtune.mechanisms import (
    accumulation,
    data_parallel,
    evaluation,
    peft,
    precision,
    recompute,
    sharding,
    static_graph,
)
from vramtune.mechanisms.base import Facts, Field, Mechanism, Option

MECHANISMS: list[Mechanism] = [peft.MECHANISM, precision.MECHANISM, accumulation.MECHANISM, recompute.MECHANISM,
                               data_parallel.MECHANISM, sharding.MECHANISM, static_graph.MECHANISM,
                               evaluation.MECHANISM]
BY_NAME: dict[str, Mechanism] = {mechanism.name: mechanism for mechanism in MECHANISMS}
_FIELDS: dict[str, Field] = {}


def strategy_fields() -> tuple[Field, ...]:
    """Every registered mechanism's strategy fields, in registry order."""
    if not _FIELDS:
        _FIELDS.update((field.name, field) for mechanism in MECHANISMS for field in mechanism.fields)
    return tuple(_FIELDS.values())


def field_named(name: str) -> Field | None:
    strategy_fields()
    return _FIELDS.get(name)


def register(mechanism: Mechanism, before: str | None = None) -> None:
    """Add a mechanism (at the end, or before the one named): its fields join every Strategy, with their
    defaults for strategies made before."""
    if mechanism.name in BY_NAME:
        raise ValueError(f"a mechanism named {mechanism.name!r} is already registered")
    index = len(MECHANISMS) if before is None else MECHANISMS.index(BY_NAME[before])
    MECHANISMS.insert(index, mechanism)
    BY_NAME[mechanism.name] = mechanism
    _FIELDS.clear()


def unregister(name: str) -> None:
    MECHANISMS.remove(BY_NAME.pop(name))
    _FIELDS.clear()


def micro_batch_floor(settings: dict[str, Any], facts: dict[str, Facts]) -> tuple[int, str | None]:
    """The smallest micro-batch any mechanism lets a choice take (a BatchNorm model's floor), and why; settings and
    facts by mechanism name."""
    floors = [floor for m in MECHANISMS if (floor := m.min_micro_batch(settings.get(m.name), facts.get(m.name, {})))]
    return max(floors, default=(1, None))


def fixed_fields(settings: dict[str, Any]) -> dict[str, Any]:
    """The strategy fields the spec's settings (by mechanism name) fix for the whole run (the devices)."""
    return {key: value for m in MECHANISMS for key, value in m.fixed(settings.get(m.name)).items()}


def formers_defaults() -> dict[str, Any]:
    """The PaddleFormers keys the mechanisms read -> what PaddleFormers takes when a config leaves them out."""
    return {key: value for mechanism in MECHANISMS for key, value in mechanism.formers_defaults.items()}


def batch_only() -> dict[str, Any]:
    """The spec's search keys that leave the search the batch alone (the micro-batch, and accumulation where the
    spec allows it): for a tool whose config carries no other memory key (PaddleSeg: AMP is a flag there)."""
    return {"recompute": "off", "sharding": "off", "to_static": "off", "precisions": ["fp32"]}


__all__ = ["BY_NAME", "MECHANISMS", "Facts", "Field", "Mechanism", "Option", "batch_only", "field_named",
           "fixed_fields", "formers_defaults", "micro_batch_floor", "register", "strategy_fields", "unregister"]
