"""What both estimates' rows share: the recompute levels they explore, the predicted best among them (speed is not
estimated: vramtune's preferences decide), and the facts about the model their words take from the counts (no probe
ran)."""
from __future__ import annotations

from collections.abc import Iterable

from vramtune.core.strategy import Facts, Strategy, level_of
from vramtune.memory.state import Counts, Row

# in their order: the first decides, the next breaks its ties
PREFERENCES = ("AMP O2, then O1, then fp32", "the fewest layers recomputed", "the largest micro-batch",
               "the lowest sharding stage")
LEVEL_ORDER = {"O2": 0, "O1": 1, "O0": 2}  # the most memory saved first


def recompute_levels(layers: int) -> list[int]:
    """None, a quarter, half, three quarters and every layer recomputed."""
    return sorted({0, layers // 4, layers // 2, 3 * layers // 4, layers})


def preference(strategy: Strategy) -> tuple[int, int, int, int, str]:
    """The sort key of PREFERENCES (the lower preferred), the precision's name last."""
    return (LEVEL_ORDER[level_of(strategy.precision)], strategy.recomputed_blocks, -strategy.micro_batch,
            strategy.sharding_stage, strategy.precision)


def predicted_best(rows: Iterable[Row]) -> Row | None:
    """The preferred of the rows predicted to fit; None when none is."""
    return min((row for row in rows if row.fits), key=lambda row: preference(row.strategy), default=None)


def counted_facts(counts: Counts) -> Facts:
    """The facts a probe would record, as the estimate knows them from the counts: the counted layers as recompute's
    blocks."""
    return {"total_blocks": counts.layers}
