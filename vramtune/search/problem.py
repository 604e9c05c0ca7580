"""What the search is given (the problem, a measure function) and what it gives back (the outcome)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from vramtune.core.records import Budget, Device, ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.mechanisms.base import Mechanism

Measure = Callable[[Strategy], ProbeResult]
Progress = Callable[[str, Strategy, "ProbeResult | None"], None]  # (rung, strategy, None before / result after)
GiB = 2**30


class BuildFailure(Exception):
    """The model cannot be built at all: every probe would fail the same way, so tuning stops."""


def non_memory_failure(result: ProbeResult) -> str | None:
    """The error of a probe that crashed for a reason other than memory (a signal may be the OOM killer)."""
    if result.status != "crashed" or not result.error or result.error.startswith("killed by"):
        return None
    return result.error


@dataclass
class SearchProblem:
    target_batch: int
    micro_batches: list[int]  # candidates that reach the target exactly, largest first
    budget: Budget
    device: Device
    mechanisms: tuple[Mechanism, ...]  # every mechanism, in registry order (the composition root's)
    settings: dict[str, Any] = field(default_factory=dict)  # mechanism name -> its settings from the spec
    speed_rises_with_batch: bool = False  # GPUs: throughput rises with the micro-batch and saturates
    state: Callable[[Strategy], dict[str, float] | None] | None = None  # one rank's state by part, counted before
    #                                                                     any probe (memory/counted.py), or None
    activations: float | None = None  # fp32 activation bytes per sample predicted before any probe
    #                                   (memory/prior.py), or None
    model_unsupported: Callable[[Strategy], str | None] | None = None  # why the model cannot train under a strategy
    #                                   on the device (its attention kernel in fp32), or None: that setting is skipped

    @property
    def limit(self) -> float:
        return self.budget.limit

    @property
    def cap(self) -> float:
        """Above this a probe fails without figures (the budget, or the card below it)."""
        return min(self.budget.bytes, self.device.total_bytes or self.budget.bytes)

    def sized(self, strategy: Strategy, micro_batch: int) -> Strategy:
        """The strategy reaching the target with this micro-batch (per rank): as many micro-steps as one, over every
        rank, leaves of the target."""
        step = strategy.with_(micro_batch=micro_batch, accumulation=1)
        return step.with_(accumulation=self.target_batch // step.batch)

    def unsupported(self, strategy: Strategy) -> str | None:
        """Why the device cannot run the strategy (the first mechanism that says), or None."""
        return next((why for m in self.mechanisms if (why := m.unsupported(strategy, self.device))), None)


@dataclass
class Outcome:
    chosen: ProbeResult | None
    probes: list[ProbeResult]
    notes: list[str]
    closest: ProbeResult | None = None
    suggestions: list[str] = field(default_factory=list)
