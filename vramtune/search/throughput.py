"""The search of one outer setting (a precision, a sharding stage): the micro-batch boundary, the walk to smaller
micro-batches while they are faster, then each axis (recompute) at larger micro-batches while those are faster.
Throughput is measured, not assumed: the speed model (search/speed.py) only rules out a probe predicted no faster
than the best measured."""
from __future__ import annotations

from typing import Callable

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.mechanisms.base import Mechanism, SearchView
from vramtune.search.boundary import boundary, plain_boundary
from vramtune.search.choice import TIE
from vramtune.search.record import Record
from vramtune.search.speed import SpeedModel

REFINE_MARGIN = 0.10  # at the micro-batch chosen, one level less saving is measured unless predicted this far over


def no_faster(how: str, estimate: float, best: float) -> str:
    """Why a configuration predicted no faster than the best measured is not probed: slower, or faster by less
    than a tie (where the simpler configuration is chosen)."""
    if estimate <= best:
        return f"{how} {estimate:.1f} samples/s, no faster than the best measured {best:.1f}"
    return (f"{how} {estimate:.1f} samples/s, within {TIE:.0%} of the best measured {best:.1f} (where the simpler "
            "configuration is chosen)")


class Throughput:
    """`search`: what the axes' role functions are given; `record`: the probes."""

    def __init__(self, search: SearchView, record: Record):
        self.search, self.record = search, record

    def speed(self, strategy: Strategy) -> SpeedModel:
        record = self.record
        return SpeedModel(record.roles.all, record.results, strategy, record.roles.axes,
                          modelled_base=record.problem.speed_rises_with_batch)

    def deep_search(self, base: Strategy) -> None:
        """The micro-batch boundary and the throughput walk for one outer setting, then the axes at larger
        micro-batches while larger is faster; stopped by a numeric failure, or before any probe by a state counted
        over the limit (no micro-batch or axis shrinks the state)."""
        record = self.record
        alone = record.prediction.state_over_limit(base)
        if alone is not None:
            record.over_by_state(base, alone)
            return
        ascending, best_plain = plain_boundary(record, base)
        failed = record.unstable(base)
        if failed is not None:
            record.note_unstable(base, failed)
            return
        floor = next(i for i, s in enumerate(ascending) if s.micro_batch >= record.floor)
        best: ProbeResult | None = None
        larger_is_faster = True
        start = floor  # what fits is below the floor, or nothing fits: the axes from the floor up
        if best_plain is not None and ascending.index(best_plain) >= floor:
            start = ascending.index(best_plain) + 1
            best = record.results[best_plain]
            best, larger_is_faster = self.smaller_walk(ascending[floor:], start - 1 - floor, best)
        if not larger_is_faster:
            return
        for axis in record.roles.axes:
            self.axis_search(axis, ascending[start:], best)

    def smaller_walk(self, ascending: list[Strategy], index: int, best: ProbeResult) -> tuple[ProbeResult, bool]:
        """Does a smaller micro-batch train faster? (It often does on CPUs.) Walk down the candidates (from the
        floor up) while it does; then try the smallest one too, since CPU throughput need not be monotonic.
        On a device whose speed rises with the micro-batch, the smallest is tried only after the walk improved,
        and a step predicted to be no faster is not probed.
        Returns (the best, whether larger micro-batches were faster)."""
        rises = self.record.problem.speed_rises_with_batch
        improved = False
        if rises and index > 0:
            predicted = self.speed(best.strategy).plain(ascending[index - 1].micro_batch)
            if predicted is not None and predicted <= best.samples_per_sec * (1 + TIE):
                return best, True
        while index > 0:
            smaller = self.record.probe("throughput", ascending[index - 1])
            if not (smaller.fits and smaller.samples_per_sec > best.samples_per_sec * (1 + TIE)):
                break
            best, index, improved = smaller, index - 1, True
        if (improved or not rises) and index > 1:
            smallest = self.record.probe("throughput", ascending[0])
            if smallest.fits and smallest.samples_per_sec > best.samples_per_sec * (1 + TIE):
                best, improved = smallest, True
        return best, not improved

    # -- the axes ----------------------------------------------------------------------------------------
    def axis_search(self, axis: Mechanism, plains: list[Strategy], best: ProbeResult | None) -> None:
        """At each larger micro-batch, the least saving level of the axis that fits (predicted, verified), while
        that is faster than the best so far. Where speed rises smoothly with the micro-batch (GPUs) and the axis'
        cost is known, it jumps to the micro-batch predicted fastest. The last level found is refined at its own
        micro-batch: one level less saving is measured where the prediction did not already rule it out by a probe."""
        record = self.record
        index, found_best = 0, None
        while index < len(plains):
            index = self.fastest_ahead(axis, plains, index, best)
            plain = plains[index]
            levels = axis.levels(plain, self.search)
            if not levels:
                break
            estimate, how = self.estimate_speed(levels), "predicted"
            if estimate is None:
                estimate, how = self.most_speed(levels), "at most"
            if best is not None and estimate is not None and estimate <= best.samples_per_sec * (1 + TIE):
                record.note(f"{record.roles.outer_label(plain)} micro-batch {plain.micro_batch} with {axis.name} not "
                            f"probed: {no_faster(how, estimate, best.samples_per_sec)}")
                break
            found = boundary(record, axis.name, levels)
            failed = record.unstable(plain)
            if failed is not None:
                record.note_unstable(plain, failed)
                return
            if found is None:
                break  # even the most saving level does not fit: a larger micro-batch will not either
            result = axis.refine_level(found, self.search)
            if best is not None and result.samples_per_sec <= best.samples_per_sec * (1 + TIE):
                break  # the axis at a larger micro-batch is no faster
            best, found_best, index = result, (found, levels), index + 1
        if found_best is not None:
            self.refine_final(axis, *found_best)

    def fastest_ahead(self, axis: Mechanism, plains: list[Strategy], index: int, best: ProbeResult | None) -> int:
        """On a GPU, with the axis' cost measured: the index of the micro-batch ahead predicted fastest."""
        if not (self.record.problem.speed_rises_with_batch and best is not None):
            return index
        estimates = [(speed, i) for i, plain in enumerate(plains[index:], index)
                     if (levels := axis.levels(plain, self.search)) and (speed := self.estimate_speed(levels))]
        return max(estimates)[1] if estimates else index

    def refine_final(self, axis: Mechanism, found: Strategy, levels: list[Strategy]) -> None:
        """The fewest units of the axis that fit at the micro-batch chosen: one level less saving than found, where
        no probe has ruled it out and the prediction that stopped the boundary is within the model's error."""
        position = levels.index(found)
        if position + 1 >= len(levels) or levels[position + 1] in self.record.results:
            return
        predicted = self.record.prediction.predict(levels[position + 1])
        if predicted is None or predicted <= self.record.problem.limit * (1 + REFINE_MARGIN):
            self.record.probe(axis.name, levels[position + 1])

    def estimate_speed(self, levels: list[Strategy]) -> float | None:
        """Predicted samples/s of the least saving level predicted to fit at one micro-batch: its speed with the
        axis off (measured: over-budget probes still report it; or modelled where speed rises with the batch)
        less the measured cost per unit of the axis."""
        found = self.least_saving_fit(levels, self.record.prediction.predict)
        return None if found is None else self.speed(levels[0]).predict(*found)

    def most_speed(self, levels: list[Strategy]) -> float | None:
        """The most samples/s an axis' levels at one micro-batch can reach before its memory saving and cost are
        measured: the least saving level that could fit (each unit saving the most it can) at the least the axis
        can cost (Mechanism.largest_coefficient, least_cost)."""
        found = self.least_saving_fit(levels, self.record.prediction.least)
        if found is None:
            return None
        level, measured = found
        least = sum(axis.least_cost(level, self.record.learned) for axis in self.record.roles.axes)
        return self.speed(levels[0]).bound(level, least, measured)

    def least_saving_fit(self, levels: list[Strategy], peak: Callable[[Strategy], float | None]) \
            -> tuple[Strategy, float | None] | None:
        """The least saving level whose `peak` fits, and the speed measured with the axis off (levels[-1]); None
        when none fits, or when nothing is measured and speed is not modelled as rising with the batch."""
        plain = self.record.results.get(levels[-1])
        measured = plain.samples_per_sec if plain is not None else None
        if not measured and not self.record.problem.speed_rises_with_batch:
            return None
        fitting = [s for s in levels if (peak(s) or float("inf")) <= self.record.problem.limit]
        return (fitting[-1], measured) if fitting else None
