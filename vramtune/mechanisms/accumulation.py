"""Gradient accumulation: micro-batch m, k micro-batches per optimizer step (m x k = the target batch per rank).
The micro-batch search itself (the boundary, the throughput walk) is the ladder's core; this module owns the
candidates, their floor and the term accumulating adds to memory."""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.core.reading import positive
from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Mechanism, Option, SearchView
from vramtune.memory.line import Term

BATCHNORM_FLOOR = 16  # BatchNorm statistics over fewer samples are noisy (Wu & He, Group Normalization, 2018)


@dataclass
class AccumulationSearch:
    max_accumulation: int = 64
    micro_batches: list[int] | None = None  # allowed micro-batch sizes; None = every divisor of the target
    min_micro_batch: int | None = None  # None: BATCHNORM_FLOOR for models with BatchNorm layers, else 1

    def candidates(self, target_batch: int) -> list[int]:
        """Micro-batches that reach the target exactly within max_accumulation, largest first."""
        allowed = self.micro_batches or range(1, target_batch + 1)
        return sorted((m for m in allowed if target_batch % m == 0
                       and target_batch // m <= self.max_accumulation), reverse=True)


class Accumulation(Mechanism):
    name = "accumulation"
    fields = (FIELDS["micro_batch"], FIELDS["accumulation"])
    options = (Option("max_accumulation", "--max-accumulation", int, None, "largest accumulation tried",
                      lambda value: {"search.max_accumulation": value}),)
    term = Term(nonnegative=False, soft=True)  # k = 1 frees the gradients before the next forward: measured

    def read(self, spec) -> AccumulationSearch:
        section = spec.search
        settings = AccumulationSearch(
            max_accumulation=section.get("max_accumulation", int, 64, check=positive(1 << 16)) or 64,
            micro_batches=section.get("micro_batches", list, None),
            min_micro_batch=section.get("min_micro_batch", int, None, check=positive(1 << 20)))
        if settings.micro_batches is not None and not all(
                isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in settings.micro_batches):
            section.fail("micro_batches", f"must be a list of positive integers, got {settings.micro_batches}")
            settings.micro_batches = None
        return settings


    def weight(self, strategy) -> int:
        return strategy.accumulation if strategy.accumulation > 1 else 0

    def memory_term(self, strategy) -> float:
        # k = 1 frees the gradients before the next forward; accumulating keeps them alive: measured off the line
        return 1.0 if strategy.accumulation == 1 else 0.0

    def min_micro_batch(self, settings: AccumulationSearch, facts) -> tuple[int, str] | None:
        if settings.min_micro_batch:
            return settings.min_micro_batch, "search.min_micro_batch"
        layers = facts.get("batchnorm_layers")
        if layers:
            return BATCHNORM_FLOOR, f"the model has {layers} BatchNorm layers, whose statistics over fewer samples " \
                                    "are noisy"
        return None

    def suggest(self, search: SearchView) -> list[str]:
        settings, smallest = search.settings(self.name), search.problem.micro_batches[-1]
        if smallest > search.floor:  # at the floor, a smaller one would not be probed
            return [f"a smaller micro-batch: lower train.target_batch or raise search.max_accumulation "
                    f"(now {settings.max_accumulation}; the smallest micro-batch tried was {smallest})"]
        return []

    def prepare_model(self, model, strategy, settings):
        """Counts the BatchNorm layers: their statistics come from one micro-batch, so small ones get a floor."""
        from vramtune.memory.layer_kinds import BATCHNORM

        return model, {"batchnorm_layers": sum(isinstance(layer, BATCHNORM) for layer in model.sublayers())}


MECHANISM = Accumulation()
