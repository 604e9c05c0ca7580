"""The choice: the fitting probe with the highest measured throughput at or above the micro-batch floor; near-ties go
to the simpler one."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Facts, Strategy
from vramtune.mechanisms.base import Mechanism

TIE = 0.02  # throughputs within 2% are a tie: the simpler configuration wins


def complexity(mechanisms: Sequence[Mechanism], strategy: Strategy) -> tuple[int, ...]:
    """Fewer mechanisms in use first, then the later (costlier) mechanisms' weights: recompute, accumulation..."""
    weights = [mechanism.weight(strategy) for mechanism in mechanisms]
    return (sum(1 for w in weights if w), *reversed(weights))


def choose(mechanisms: Sequence[Mechanism], results: Iterable[ProbeResult], min_micro_batch: int = 1
           ) -> ProbeResult | None:
    """The fastest fitting result with at least `min_micro_batch` samples per micro-batch."""
    fitting = [r for r in results if r.fits and r.strategy.micro_batch >= min_micro_batch]
    if not fitting:
        return None
    best = max(r.samples_per_sec for r in fitting)
    contenders = [r for r in fitting if r.samples_per_sec >= best * (1 - TIE)]
    return min(contenders, key=lambda r: (complexity(mechanisms, r.strategy), -r.samples_per_sec))


def micro_batch_floor(mechanisms: Sequence[Mechanism], settings: dict[str, Any], facts: Facts
                      ) -> tuple[int, str | None]:
    """The smallest micro-batch any mechanism lets a choice take (a BatchNorm model's floor), and why; settings by
    mechanism name."""
    floors = [floor for m in mechanisms if (floor := m.min_micro_batch(settings.get(m.name), facts))]
    return max(floors, default=(1, None))
