"""The ladder's data: which mechanism plays which role, in registry order. A mechanism plays a role by defining the
role's function (mechanisms/base.py); the core (search/ladder.py) runs the roles. One the user fixes (its settings
only) defines none.

- whole_batch: tried at the whole batch (one micro-batch per rank), before any accumulation.
- outer (`alternatives`): alternatives each searched in depth (accumulation, then the axes), nested in this order
  (the first outermost); an alternative is searched only where it could win (`worth_searching`).
- axes (`levels`): searched at one micro-batch, from most saving to none, at micro-batches larger than plain
  accumulation reaches, while larger is faster; one axis at a time, the others off.
- refine: variants of the best configuration, tried last and kept only when they measured better.
"""
from __future__ import annotations

from vramtune.mechanisms.base import Mechanism
from vramtune.plugins import MECHANISMS


def playing(role: str) -> list[str]:
    """The registered mechanisms that define the role's function, in registry order."""
    return [m.name for m in MECHANISMS if getattr(type(m), role) is not getattr(Mechanism, role)]


WHOLE_BATCH = playing("whole_batch")
OUTER = playing("alternatives")
AXES = playing("levels")
REFINE = playing("refine")
