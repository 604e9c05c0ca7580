"""The registry of memory mechanisms. Its order is the order of application: the child applies each hook
(configure, prepare_model, prepare_training, forward contexts, the loss scaler) mechanism by mechanism in this
order, so AMP O2's decorate wraps before data parallel and sharding, as PaddleNLP's Trainer does, and to_static
compiles last; labels and the tie rule follow it too. Adding one: its module, its tests, one line here (and,
if the search explores it, its role in search/roles.py)."""
from __future__ import annotations

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


__all__ = ["BY_NAME", "MECHANISMS", "Facts", "Field", "Mechanism", "Option", "field_named", "register",
           "strategy_fields", "unregister"]
