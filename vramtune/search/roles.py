"""The ladder's data: which mechanism plays which role, in the order of the mechanisms given. A mechanism plays a role
by defining the role's function (mechanisms/base.py); the ladder (search/ladder.py) runs the roles. One the user
fixes (its settings only) defines none.

- whole_batch: tried at the whole batch (one micro-batch per rank), before any accumulation.
- outer (`alternatives`): alternatives each searched in depth (accumulation, then the axes), nested in this order
  (the first outermost); an alternative is searched only where it could win (`worth_searching`).
- axes (`levels`): searched at one micro-batch, from most saving to none, at micro-batches larger than plain
  accumulation reaches, while larger is faster; one axis at a time, the others off.
- refine: variants of the best configuration, tried last and kept only when they measured better.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vramtune.core.strategy import Strategy
from vramtune.mechanisms.base import Mechanism


def playing(mechanisms: Sequence[Mechanism], role: str) -> tuple[Mechanism, ...]:
    """The mechanisms that define the role's function, in their order."""
    return tuple(m for m in mechanisms if getattr(type(m), role) is not getattr(Mechanism, role))


@dataclass(frozen=True)
class Roles:
    """Every mechanism (`all`, in registry order) and those playing each role."""

    all: tuple[Mechanism, ...]
    whole_batch: tuple[Mechanism, ...]
    outer: tuple[Mechanism, ...]
    axes: tuple[Mechanism, ...]
    refine: tuple[Mechanism, ...]

    @classmethod
    def of(cls, mechanisms: Sequence[Mechanism]) -> Roles:
        return cls(tuple(mechanisms), playing(mechanisms, "whole_batch"), playing(mechanisms, "alternatives"),
                   playing(mechanisms, "levels"), playing(mechanisms, "refine"))

    def without_axes(self, strategy: Strategy) -> Strategy:
        """The strategy with every axis off."""
        return strategy.with_(**{f.name: f.default for m in self.axes for f in m.fields})

    def outer_label(self, strategy: Strategy) -> str:
        """The strategy's label by its outer alternatives alone (e.g. its precision)."""
        outer = {m.name for m in self.outer}
        return strategy.label(without=tuple(m.name for m in self.all if m.name not in outer))
