"""The outer alternatives (a precision, a sharding stage): each combination nested in the roles' order, searched in
depth only where its mechanism says it could win — by comparing it with the best so far at the best's configuration
(could_win)."""
from __future__ import annotations

import dataclasses
from typing import Any

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.mechanisms.base import Mechanism, SearchView
from vramtune.search.boundary import NEIGHBOUR_MARGIN
from vramtune.search.choice import TIE
from vramtune.search.record import Record
from vramtune.search.roles import Roles
from vramtune.search.throughput import Throughput

COMPARE_SMALLER = 2  # smaller micro-batches tried for a comparison that does not fit


def ceiling(roles: Roles, result: ProbeResult) -> float | None:
    """The fastest the result's strategy could run with its axes off: its speed over what they can cost at most."""
    used = [axis for axis in roles.axes if axis.weight(result.strategy)]
    if any(axis.most_cost is None for axis in used) or not result.samples_per_sec:
        return None
    lost = sum(axis.most_cost for axis in used)
    return result.samples_per_sec / (1 - lost) if lost < 1 else None


class Nesting:
    """`search`: what the outer mechanisms' role functions are given; `record`: the probes; `throughput`: the
    search in depth of one setting and its speeds."""

    def __init__(self, search: SearchView, record: Record, throughput: Throughput):
        self.search, self.record, self.throughput = search, record, throughput

    def outer(self, depth: int, base: Strategy) -> None:
        """Each combination of the outer alternatives, nested in the ladder's order, searched in depth where the
        alternative's mechanism says it could win."""
        mechanisms = self.record.roles.outer
        if depth == len(mechanisms):
            self.throughput.deep_search(base)
            return
        mechanism = mechanisms[depth]
        model_unsupported = self.record.problem.model_unsupported
        for changes in mechanism.alternatives(base, self.search):
            candidate = base.with_(**changes)
            why = model_unsupported(candidate) if model_unsupported else None
            if why:  # the model cannot train under this setting here (its probes would all be unsupported)
                self.record.note(f"{self.record.roles.outer_label(candidate)} skipped: {why}")
            elif mechanism.worth_searching(candidate, self.search):
                self.outer(depth + 1, candidate)

    def could_win(self, mechanism: Mechanism, candidate: Strategy) -> bool:
        """Whether searching the candidate's setting of `mechanism` deep can beat the best so far: measured at the
        best's configuration; where it does not fit there, with every axis at its most saving level and their
        measured cost taken off again, or, without that cost, the most they can cost (`most_cost`) where even that
        leaves it no faster, or else against the best's setting measured at the same configuration (at smaller
        micro-batches while the candidate does not fit)."""
        record = self.record
        best = record.best()
        if best is None:
            return True
        changes = {f.name: getattr(candidate, f.name) for f in mechanism.fields}
        same = self.compare_probe(best.strategy.with_(**changes))
        speed, reference = same.samples_per_sec, best
        bound = ""
        if not speed and same.status != "unstable":
            same, speed, reference, bound = self.compare_where_it_fits(changes, best, same)
        if same.status == "unstable":
            record.note_unstable(candidate, same)
            return False
        if reference is None or not speed or not reference.samples_per_sec:
            return True
        if speed > reference.samples_per_sec * (1 + TIE):
            return True
        record.note(f"{candidate.part(mechanism.name)} not searched further: {bound}{speed:.1f} samples/s at "
                    f"{reference.strategy.with_(**changes).label()}, no faster than {reference.strategy.label()} at "
                    f"{reference.samples_per_sec:.1f}")
        return False

    def compare_where_it_fits(self, changes: dict[str, Any], best: ProbeResult, result: ProbeResult
                              ) -> tuple[ProbeResult, float | None, ProbeResult | None, str]:
        """(the candidate's probe, its speed, what to compare it with, "at most " where the speed is a bound) for
        the best's configuration with `changes` at a smaller micro-batch with every axis off where that is predicted
        to fit, else every axis at its most saving level at the best's micro-batch or a smaller one."""
        record, speed = self.record, self.throughput.speed
        problem = record.problem
        sizes = [m for m in problem.micro_batches
                 if record.floor <= m <= best.strategy.micro_batch][:1 + COMPARE_SMALLER]
        plains = [record.roles.without_axes(problem.sized(best.strategy.with_(**changes), size)) for size in sizes]

        def modelled(strategy: Strategy) -> bool:  # the best's speed at its size is modelled: no probe of it
            mine = strategy.with_(**{name: getattr(best.strategy, name) for name in changes})
            return problem.speed_rises_with_batch and speed(mine).plain(mine.micro_batch) is not None

        hopeful = [s for s in plains[1:]
                   if (record.prediction.expected(s) or float("inf")) <= problem.limit and modelled(s)]
        for strategy in hopeful[:1] + [self.most_saving(s) for s in plains]:
            result = self.compare_probe(strategy)
            if result.status == "unstable":
                return result, None, None, ""
            if not result.samples_per_sec:
                continue
            if strategy.micro_batch == best.strategy.micro_batch:
                plain = speed(result.strategy).predict(result.strategy, 1.0)  # the axes' cost as a fraction
                if plain:
                    extra = speed(result.strategy).predict(best.strategy.with_(**changes), 1.0) or 1.0
                    return result, result.samples_per_sec * extra / plain, best, ""
                most = ceiling(record.roles, result)
                if most is not None and most <= best.samples_per_sec * (1 + TIE):
                    return result, most, best, "at most "  # no faster even if its axes cost all they can
            mine = result.strategy.with_(**{name: getattr(best.strategy, name) for name in changes})
            modelled_speed = speed(mine).predict(mine) if problem.speed_rises_with_batch else None
            if mine not in record.results and modelled_speed:
                return result, result.samples_per_sec, dataclasses.replace(best, strategy=mine,
                                                                           samples_per_sec=modelled_speed), ""
            return result, result.samples_per_sec, self.record.probe("compare", mine), ""
        return result, None, None, ""

    def compare_probe(self, strategy: Strategy) -> ProbeResult:
        """A comparison's probe, unless its memory group is unmeasured and the prior puts it past the cap (it would
        fail without figures): then an unmeasured result (not kept), so the comparison moves on."""
        record = self.record
        predicted = record.prediction.prior(strategy) if strategy not in record.results and not \
            record.prediction.memory_model(strategy).points else None
        if predicted is not None and predicted > record.problem.cap * (1 + NEIGHBOUR_MARGIN):
            return ProbeResult("oom", strategy, error="predicted past the budget", rung="prior")
        return record.probe("compare", strategy)

    def most_saving(self, strategy: Strategy) -> Strategy:
        """The strategy with every axis at its most saving level (e.g. every block recomputed)."""
        saving = self.record.roles.without_axes(strategy)
        for axis in self.record.roles.axes:
            levels = axis.levels(saving, self.search)
            saving = levels[0] if levels else saving
        return saving
