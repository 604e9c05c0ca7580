"""The state counted before any probe: the lazy count `vramtune estimate` uses (child/counting.py: the model built
without memory) turned into one rank's state by part for any strategy, by the estimate's own arithmetic
(estimating/model.py `state`: each mechanism's bytes per parameter and partitions). The count runs once, when the
search first asks (before its first probe); a model that cannot be counted gives None and the search does without."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from vramtune.core.strategy import Strategy
from vramtune.memory.state import OPTIMIZER_BYTES, Counting, Counts, Given, state

State = Callable[[Strategy], "dict[str, float] | None"]
PROBE_PART = {"weights": "weight", "gradients": "gradient", "optimizer_state": "optimizer"}  # as a probe reports
PARTS = tuple(PROBE_PART.values())  # the state every probe counts; the others are mechanisms' own (O1's copies)


def given_for(optimizer: str, settings: dict[str, Any]) -> Given:
    """What the count needs beside the strategy: the optimizer, and whether a mechanism keeps fp32 gradients."""
    return Given(optimizer, any(getattr(value, "master_grad", False) for value in settings.values()))


def counted_state(mechanisms: Sequence[Counting], count: Callable[[], dict[str, Any] | None], given: Given) -> State:
    """strategy -> one rank's counted state by part (weight, gradient, optimizer and the mechanisms' own parts);
    `count` (the lazy count's dict, or None) is called once, at the first question."""
    counts: list[Counts | None] = []

    def state_of(strategy: Strategy) -> dict[str, float] | None:
        if not counts:
            counted = count()
            counts.append(Counts(**counted) if counted and given.optimizer in OPTIMIZER_BYTES else None)
        if counts[0] is None:
            return None
        parts = state(mechanisms, counts[0], strategy, given)
        return {PROBE_PART.get(part, part): float(size) for part, size in parts.items()}

    return state_of
