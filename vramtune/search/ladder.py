"""The tuning ladder. Pure: it only calls a `measure(strategy) -> ProbeResult` function.

The core is the micro-batch search: at each outer setting, the largest micro-batch that fits (predicted from the
memory model, verified, corrected on a miss), then a walk to smaller micro-batches while they are faster, then
the axes at larger micro-batches while those are faster. Which mechanism plays which role (tried at the whole
batch, an outer alternative, an axis, a refinement of the best) is the ladder's data (search/roles.py); each
mechanism's own functions say what its alternatives, levels and refinements are (mechanisms/base.py).
Throughput is measured, not assumed; memory is predicted (search/memory.py) before it is measured. What is known
before a probe (each mechanism's bounds, another precision's activations scaled by the stated AMP factors: the
prior, docs/search.md) only places probes and rules out ones that cannot fit or cannot win.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from vramtune.core.records import Budget, Device, ProbeResult
from vramtune.core.strategy import Facts, Strategy
from vramtune.core.units import format_bytes
from vramtune.mechanisms.base import Mechanism
from vramtune.memory.line import MemoryModel, memory_group
from vramtune.memory.prior import PRIOR_ERROR, PRIOR_MARGIN
from vramtune.plugins import BY_NAME, MECHANISMS, micro_batch_floor
from vramtune.search import roles
from vramtune.search.choice import TIE, choose
from vramtune.search.speed import SpeedModel

Measure = Callable[[Strategy], ProbeResult]
Progress = Callable[[str, Strategy, "ProbeResult | None"], None]  # (rung, strategy, None before / result after)

NEIGHBOUR_MARGIN = 0.03  # a neighbour predicted over the limit by more than this is not probed
REFINE_MARGIN = 0.10  # at the micro-batch chosen, one level less saving is measured unless predicted this far over
SAME_FAILURES = 2  # this many probes failing alike, with nothing measured, stop the tuning
PARTS = ("weight", "gradient", "optimizer")  # the state a probe counts (ProbeResult.PART_bytes)
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
    settings: dict[str, Any] = field(default_factory=dict)  # mechanism name -> its settings from the spec
    speed_rises_with_batch: bool = False  # GPUs: throughput rises with the micro-batch and saturates
    state: Callable[[Strategy], dict[str, float] | None] | None = None  # one rank's state by part, counted before
    #                                                                     any probe (search/counted.py), or None
    activations: float | None = None  # fp32 activation bytes per sample predicted before any probe
    #                                   (search/activations.py), or None


@dataclass
class Outcome:
    chosen: ProbeResult | None
    probes: list[ProbeResult]
    notes: list[str]
    closest: ProbeResult | None = None
    suggestions: list[str] = field(default_factory=list)


def _roles(names: list[str]) -> list[Mechanism]:
    return [BY_NAME[name] for name in names if name in BY_NAME]


class Tuner:
    """Runs the ladder over a measure function, keeping every probe in order. Mechanisms' search functions see
    it: they probe, predict, note and read their settings and facts through it."""

    def __init__(self, measure: Measure, problem: SearchProblem, progress: Progress | None = None):
        self.measure, self.problem = measure, problem
        self.progress = progress or (lambda rung, strategy, result: None)
        self.results: dict[Strategy, ProbeResult] = {}
        self.notes: list[str] = []
        self.learned: Facts = {}  # what the probes learned about the model
        self.least_state: float | None = None  # the least counted state of a setting not probed for it
        self.prior_missed = False  # a probe the activation prior placed failed without figures: it is not used again
        fixed = {k: v for m in MECHANISMS for k, v in m.fixed(self.settings(m.name)).items()}
        self.base = Strategy(**fixed)  # every mechanism off, the user's fixed fields (ranks) set

    # -- what mechanisms read --------------------------------------------------------------------------
    def settings(self, mechanism: str) -> Any:
        return self.problem.settings.get(mechanism)

    @property
    def facts(self) -> Facts:
        """What the probes learned about the model."""
        return self.learned

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def limit(self) -> float:
        return self.problem.budget.limit

    def unsupported(self, strategy: Strategy) -> str | None:
        """Why the device cannot run the strategy (the first mechanism that says), or None."""
        return next((why for m in MECHANISMS if (why := m.unsupported(strategy, self.problem.device))), None)

    def sized(self, strategy: Strategy, micro_batch: int) -> Strategy:
        """The strategy reaching the target with this micro-batch (per rank): as many micro-steps as one, over every
        rank, leaves of the target."""
        step = strategy.with_(micro_batch=micro_batch, accumulation=1)
        return step.with_(accumulation=self.problem.target_batch // step.batch)

    def without_axes(self, strategy: Strategy) -> Strategy:
        return strategy.with_(**{f.name: f.default for m in _roles(roles.AXES) for f in m.fields})

    def most_saving(self, strategy: Strategy) -> Strategy:
        """The strategy with every axis at its most saving level (e.g. every block recomputed)."""
        saving = self.without_axes(strategy)
        for axis in _roles(roles.AXES):
            levels = axis.levels(saving, self)
            saving = levels[0] if levels else saving
        return saving

    def fitting_micro_batches(self, candidate: Strategy, varying: tuple[str, ...] = ()) -> list[int]:
        """Micro-batches measured to fit with the candidate's settings (but `varying`), every axis off."""
        skip = {"micro_batch", "accumulation", *varying}
        plain = self.without_axes(candidate)
        return [s.micro_batch for s, r in self.results.items() if r.fits and self.without_axes(s) == s and all(
            getattr(s, name) == value for name, value in plain.to_json().items() if name not in skip)]

    # -- probing ---------------------------------------------------------------------------------------
    def probe(self, rung: str, strategy: Strategy) -> ProbeResult:
        if strategy in self.results:
            return self.results[strategy]
        alone = self.state_over_limit(strategy)
        if alone is not None:
            return self.over_by_state(strategy, alone)
        least = self.prior_past_cap(strategy)
        if least is not None:
            return self.over_by_prior(strategy, least)
        placed = self.activation_prior(strategy)
        self.progress(rung, strategy, None)
        result = self.measure(strategy)
        result.rung = result.rung or rung
        self.results[strategy] = result
        self.progress(rung, strategy, result)
        if placed is not None and placed <= self.limit and not result.fits and not result.used_bytes:
            self.prior_missed = True
            self.note(f"the activations predicted from the model's config.json were too few: {strategy.label()}, "
                      "predicted to fit, failed without figures; the search went on without them")
        if result.error_kind == "build":
            raise BuildFailure(result.error or "the model cannot be built")
        self.stop_if_every_probe_fails_alike()
        self.learned.update(result.facts)
        return result

    def floor_and_why(self) -> tuple[int, str | None]:
        """The smallest micro-batch that may be chosen (a mechanism's floor, e.g. BatchNorm models), and why."""
        value, why = micro_batch_floor(self.problem.settings, self.learned)
        return min(value, self.problem.micro_batches[0]), why

    @property
    def floor(self) -> int:
        return self.floor_and_why()[0]

    def best(self) -> ProbeResult | None:
        return choose(self.results.values(), self.floor)

    def stop_if_every_probe_fails_alike(self) -> None:
        """No memory advice for a failure that has nothing to do with memory (a Paddle API missing, a bug)."""
        results = list(self.results.values())
        errors = {non_memory_failure(r) for r in results}
        if len(results) >= SAME_FAILURES and len(errors) == 1 and None not in errors:
            raise BuildFailure(f"every probe failed the same way, not for lack of memory: {errors.pop()}")

    # -- what is counted before any probe ----------------------------------------------------------------
    def counted(self, strategy: Strategy) -> dict[str, float] | None:
        """One rank's state by part from the lazy count (weight, gradient, optimizer and the mechanisms' own parts,
        e.g. AMP O1's half weight copies), or None where the model was not counted."""
        return self.problem.state(strategy) if self.problem.state is not None else None

    def state_alone(self, strategy: Strategy) -> float | None:
        """The counted weights, gradients and optimizer state of one rank: all alive at once at every step."""
        counted = self.counted(strategy)
        return sum(counted.get(part, 0.0) for part in PARTS) if counted else None

    def state_over_limit(self, strategy: Strategy) -> float | None:
        """The counted state of a strategy it alone puts over the limit, on a device where such a probe fails without
        figures (a GPU); None otherwise. A CPU probe over the budget still measures the closest miss, cheaply (and a
        CPU run, whose probes all report their state, never waits for the count)."""
        if self.problem.device.kind == "cpu":
            return None
        alone = self.state_alone(strategy)
        return alone if alone is not None and alone > self.limit else None

    def over_by_state(self, strategy: Strategy, alone: float) -> ProbeResult:
        """A strategy whose counted state alone is over the limit, not probed: an unmeasured result (not kept)."""
        outer = strategy.label(without=tuple(m.name for m in MECHANISMS if m.name not in roles.OUTER))
        self.least_state = min(alone, self.least_state or alone)
        self.note(f"{outer} not probed: its counted weights, gradients and optimizer state alone take "
                  f"{alone / GiB:.2f} GiB per rank, over the limit of {self.limit / GiB:.2f} GiB")
        return ProbeResult("oom", strategy, error="its counted state alone is over the limit", rung="counted")

    # -- the activations predicted before any probe ------------------------------------------------------
    def activation_prior(self, strategy: Strategy, factor: float = 1 + PRIOR_MARGIN) -> float | None:
        """Before any probe measured activations, a strategy with every axis off: its counted state plus the
        activations per sample predicted from the model (SearchProblem.activations, x `factor`: by default the
        safety margin a placement keeps) scaled by the stated factors (Mechanism.activation_scale). None without a
        prediction or a count; once a probe measured activations (then another precision's, scaled, predict a
        group not yet measured: prior) or a probe it placed failed without figures; and on a CPU, whose probes
        report their figures even over the budget (a CPU run never waits for the count)."""
        if self.problem.activations is None or self.prior_missed or self.without_axes(strategy) != strategy \
                or self.problem.device.kind == "cpu":
            return None
        if any(result.used_bytes for result in self.results.values()):
            return None  # activations measured: another precision's, scaled (prior), say more than config.json
        model = self.memory_model(strategy)
        if not model.fixed:
            return None
        scale = math.prod(m.activation_scale(strategy) or 1.0 for m in MECHANISMS)
        activations = strategy.micro_batch * self.problem.activations * scale * factor
        return model.fixed + activations - model.known_saving(strategy)

    def prior_past_cap(self, strategy: Strategy) -> float | None:
        """On a device where a probe past the cap fails without figures (a GPU): the predicted bytes of a strategy
        past the cap even with PRIOR_ERROR times fewer activations than predicted; None otherwise. Before any probe,
        only the whole batch is skipped: a smaller micro-batch follows, and the first probe that runs tells the
        model's facts (its blocks), whatever its memory."""
        if not self.results and strategy.micro_batch != self.problem.micro_batches[0]:
            return None
        least = self.activation_prior(strategy, 1 / PRIOR_ERROR)
        return least if least is not None and least > self.cap() else None

    def over_by_prior(self, strategy: Strategy, least: float) -> ProbeResult:
        """A strategy the activation prior puts past the cap with room to spare, not probed: an unmeasured result
        (not kept)."""
        self.note(f"{strategy.label()} not probed: with {PRIOR_ERROR:g}x fewer activations than predicted from the "
                  f"model's config.json it would take {least / GiB:.2f} GiB, past the {self.cap() / GiB:.2f} GiB a "
                  "probe can use")
        return ProbeResult("oom", strategy, error="predicted past the cap", rung="prior")

    @staticmethod
    def unpartitioned(strategy: Strategy) -> Strategy:
        """The strategy as one rank that keeps its whole state: only the mechanisms that set its memory group on."""
        return Strategy(**{f.name: getattr(strategy, f.name) if m.memory_group(strategy) else f.default
                           for m in MECHANISMS for f in m.fields})

    def memory_model(self, strategy: Strategy) -> MemoryModel:
        group = memory_group(strategy)
        mine = {s: r for s, r in self.results.items() if memory_group(s) == group}  # O2 counts other parts
        reported = {part: max((getattr(r, f"{part}_bytes") or 0 for r in mine.values()), default=0)
                    for part in PARTS}  # the largest: an unpartitioned rank's
        counted = {} if any(reported.values()) else self.counted(self.unpartitioned(strategy)) or {}
        counts = {part: counted.get(part, 0.0) for part in PARTS} if counted else reported
        # the intercept of the line fitted as if unsaved: the whole state, as one unpartitioned rank counts it (what
        # the probes report, else what was counted, with the mechanisms' own parts: O1's copies)
        return MemoryModel(((s, r.used_bytes) for s, r in mine.items() if r.measured and r.used_bytes),
                           fixed_bytes=sum(counted.values()) or sum(counts.values()) or None, counts=counts)

    def predict(self, strategy: Strategy) -> float | None:
        return self.memory_model(strategy).predict(strategy)

    def largest(self, model: MemoryModel) -> dict[str, float]:
        """Each mechanism's largest memory coefficient, from the activations per sample the model measured."""
        if model.b is None:
            return {}
        return {m.name: bound for m in model.terms
                if (bound := m.largest_coefficient(model.b, self.facts)) is not None}

    def prior(self, strategy: Strategy) -> float | None:
        """Before its memory group is measured: its counted state plus the activations measured in another group
        (another precision), scaled by the stated factors (Mechanism.activation_scale)."""
        own = self.memory_model(strategy)
        for mechanism in MECHANISMS:
            scale = mechanism.activation_scale(strategy)
            for field_ in mechanism.fields if scale else ():
                for value in field_.choices or ():
                    other = strategy.with_(**{field_.name: value})
                    model = self.memory_model(other)
                    if memory_group(other) == memory_group(strategy) or not model.points:
                        continue
                    predicted, theirs = model.predict(other), mechanism.activation_scale(other)
                    if predicted is not None and theirs:
                        state = own.fixed or model.a
                        return state + (predicted - model.a) * scale / theirs - own.known_saving(strategy)
        return self.activation_prior(strategy)

    def expected(self, strategy: Strategy) -> float | None:
        """Its predicted bytes: from its memory group's probes, or before any, the prior."""
        model = self.memory_model(strategy)
        return model.predict(strategy) if model.points else self.prior(strategy)

    def cap(self) -> float:
        """Above this a probe fails without figures (the budget, or the card below it)."""
        return min(self.problem.budget.bytes, self.problem.device.total_bytes or self.problem.budget.bytes)

    def least(self, strategy: Strategy) -> float | None:
        """The fewest bytes the strategy can take (the prior: each mechanism saving the most it can)."""
        model = self.memory_model(strategy)
        return model.least(strategy, self.largest(model))

    def speed(self, strategy: Strategy) -> SpeedModel:
        return SpeedModel(self.results, strategy, _roles(roles.AXES), modelled_base=self.problem.speed_rises_with_batch)

    def boundary(self, rung: str, candidates: list[Strategy]) -> Strategy | None:
        """The last candidate that fits, for candidates ordered by increasing memory (predict, verify, correct); it
        stops where a probe told a micro-batch floor above a candidate not probed yet (the caller runs again)."""
        limit = self.limit
        low, high = -1, len(candidates)
        for index, strategy in enumerate(candidates):
            if strategy in self.results:
                if self.results[strategy].status == "fits":
                    low = max(low, index)
                else:
                    high = min(high, index)
        prior = True  # unfitted coefficients taken at their bound, until a probe fails without figures
        blind = False  # the last probe failed without figures: the model that chose it says nothing new, so bisect
        while high - low > 1:
            if any(s.micro_batch < self.floor and s not in self.results for s in candidates):
                break  # a probe told the floor: the caller runs again from it (plain_boundary)
            model = self.memory_model(candidates[0])
            predicted = [model.predict(s) for s in candidates]
            largest = self.largest(model)
            least = [model.least(s, largest) for s in candidates]
            inside = range(low + 1, high)
            if low >= 0 and least[low + 1] is not None and least[low + 1] > limit * (1 + NEIGHBOUR_MARGIN):
                break  # the next one up cannot fit even if each mechanism saved the most it can
            if prior:
                unmeasured = not model.points
                predicted = [p if p is not None else self.prior(s) if unmeasured else bound
                             for s, p, bound in zip(candidates, predicted, least)]
            hopeful = [i for i in inside if predicted[i] is not None and predicted[i] <= limit]
            if blind:
                index = (low + high) // 2
            elif hopeful:
                index = max(hopeful)
            elif all(predicted[i] is None for i in inside):
                index = (low + high) // 2 if low >= 0 or high < len(candidates) else low + 1  # bisect
            else:
                index = low + 1
                if low >= 0 and predicted[index] is not None and predicted[index] > limit * (1 + NEIGHBOUR_MARGIN):
                    break  # the next one up is confidently over the budget
            result = self.probe(rung, candidates[index])
            if result.status == "unstable":
                break  # a numeric failure, not a memory one: no other candidate cures it
            blind = not result.used_bytes and result.status != "fits"
            prior = prior and not blind
            if result.status == "fits":
                low = index
            else:
                high = index
        return candidates[low] if low >= 0 else None

    # -- the ladder ------------------------------------------------------------------------------------
    def run(self) -> Outcome:
        for mechanism in MECHANISMS:
            for text in mechanism.notes(self):
                self.note(text)
        plain = self.sized(self.base, self.problem.micro_batches[0])
        whole = plain.accumulation == 1  # the whole batch at once per rank
        if self.probe("plain", plain).fits and whole:
            return self.finish()
        if whole:
            for mechanism in _roles(roles.WHOLE_BATCH):
                mechanism.whole_batch(plain, self)
            if self.best():
                return self.finish()
        self.outer(0, self.base)
        for mechanism in _roles(roles.REFINE):
            best = self.best()
            if best is not None:
                mechanism.refine(best, self)
        return self.finish()

    def outer(self, depth: int, base: Strategy) -> None:
        """Each combination of the outer alternatives, nested in the ladder's order, searched in depth where the
        alternative's mechanism says it could win."""
        mechanisms = _roles(roles.OUTER)
        if depth == len(mechanisms):
            self.deep_search(base)
            return
        mechanism = mechanisms[depth]
        for changes in mechanism.alternatives(base, self):
            candidate = base.with_(**changes)
            if mechanism.worth_searching(candidate, self):
                self.outer(depth + 1, candidate)

    def could_win(self, mechanism: Mechanism, candidate: Strategy) -> bool:
        """Whether searching the candidate's setting of `mechanism` deep can beat the best so far: measured at the
        best's configuration; where it does not fit there, with every axis at its most saving level and their
        measured cost taken off again, or, without that cost, the most they can cost (`most_cost`) where even that
        leaves it no faster, or else against the best's setting measured at the same configuration (at smaller
        micro-batches while the candidate does not fit)."""
        best = self.best()
        if best is None:
            return True
        changes = {f.name: getattr(candidate, f.name) for f in mechanism.fields}
        same = self.compare_probe(best.strategy.with_(**changes))
        speed, reference = same.samples_per_sec, best
        bound = ""
        if not speed and same.status != "unstable":
            same, speed, reference, bound = self.compare_where_it_fits(changes, best, same)
        if same.status == "unstable":
            self.note_unstable(candidate, same)
            return False
        if reference is None or not speed or not reference.samples_per_sec:
            return True
        if speed > reference.samples_per_sec * (1 + TIE):
            return True
        self.note(f"{candidate.part(mechanism.name)} not searched further: {bound}{speed:.1f} samples/s at "
                  f"{reference.strategy.with_(**changes).label()}, no faster than {reference.strategy.label()} at "
                  f"{reference.samples_per_sec:.1f}")
        return False

    COMPARE_SMALLER = 2  # smaller micro-batches tried for a comparison that does not fit

    def compare_where_it_fits(self, changes: dict[str, Any], best: ProbeResult, result: ProbeResult
                              ) -> tuple[ProbeResult, float | None, ProbeResult | None, str]:
        """(the candidate's probe, its speed, what to compare it with, "at most " where the speed is a bound) for
        the best's configuration with `changes` at a smaller micro-batch with every axis off where that is predicted
        to fit, else every axis at its most saving level at the best's micro-batch or a smaller one."""
        sizes = [m for m in self.problem.micro_batches
                 if self.floor <= m <= best.strategy.micro_batch][:1 + self.COMPARE_SMALLER]
        plains = [self.without_axes(self.sized(best.strategy.with_(**changes), size)) for size in sizes]

        def modelled(strategy: Strategy) -> bool:  # the best's speed at its size is modelled: no probe of it
            mine = strategy.with_(**{name: getattr(best.strategy, name) for name in changes})
            return self.problem.speed_rises_with_batch and self.speed(mine).plain(mine.micro_batch) is not None

        hopeful = [s for s in plains[1:] if (self.expected(s) or float("inf")) <= self.limit and modelled(s)]
        for strategy in hopeful[:1] + [self.most_saving(s) for s in plains]:
            result = self.compare_probe(strategy)
            if result.status == "unstable":
                return result, None, None, ""
            if not result.samples_per_sec:
                continue
            if strategy.micro_batch == best.strategy.micro_batch:
                plain = self.speed(result.strategy).predict(result.strategy, 1.0)  # the axes' cost as a fraction
                if plain:
                    extra = self.speed(result.strategy).predict(best.strategy.with_(**changes), 1.0) or 1.0
                    return result, result.samples_per_sec * extra / plain, best, ""
                ceiling = self.ceiling(result)
                if ceiling is not None and ceiling <= best.samples_per_sec * (1 + TIE):
                    return result, ceiling, best, "at most "  # no faster even if its axes cost all they can
            mine = result.strategy.with_(**{name: getattr(best.strategy, name) for name in changes})
            modelled = self.speed(mine).predict(mine) if self.problem.speed_rises_with_batch else None
            if mine not in self.results and modelled:
                return result, result.samples_per_sec, dataclasses.replace(best, strategy=mine,
                                                                           samples_per_sec=modelled), ""
            return result, result.samples_per_sec, self.probe("compare", mine), ""
        return result, None, None, ""

    def compare_probe(self, strategy: Strategy) -> ProbeResult:
        """A comparison's probe, unless its memory group is unmeasured and the prior puts it past the cap (it would
        fail without figures): then an unmeasured result (not kept), so the comparison moves on."""
        predicted = self.prior(strategy) if strategy not in self.results and not \
            self.memory_model(strategy).points else None
        if predicted is not None and predicted > self.cap() * (1 + NEIGHBOUR_MARGIN):
            return ProbeResult("oom", strategy, error="predicted past the budget", rung="prior")
        return self.probe("compare", strategy)

    @staticmethod
    def ceiling(result: ProbeResult) -> float | None:
        """The fastest the result's strategy could run with its axes off: its speed over what they can cost at most."""
        used = [axis for axis in _roles(roles.AXES) if axis.weight(result.strategy)]
        if any(axis.most_cost is None for axis in used) or not result.samples_per_sec:
            return None
        lost = sum(axis.most_cost for axis in used)
        return result.samples_per_sec / (1 - lost) if lost < 1 else None

    def unstable(self, base: Strategy) -> ProbeResult | None:
        """A probe of this outer setting whose loss went non-finite (or whose optimizer never stepped): smaller
        micro-batches and more recompute do not cure an overflow, so the setting is not searched further."""
        names = [f.name for m in _roles(roles.OUTER) for f in m.fields]
        return next((r for s, r in self.results.items() if r.status == "unstable"
                     and all(getattr(s, name) == getattr(base, name) for name in names)), None)

    def note_unstable(self, base: Strategy, result: ProbeResult) -> None:
        outer = base.label(without=tuple(m.name for m in MECHANISMS if m.name not in roles.OUTER))
        more = " or ".join(axis.name for axis in _roles(roles.AXES))
        self.note(f"{outer} not searched further: unstable at {result.strategy.label()} ({result.error}); a smaller "
                  f"micro-batch{f' or more {more}' if more else ''} does not cure a numeric failure")

    def deep_search(self, base: Strategy) -> None:
        """The micro-batch boundary and the throughput walk for one outer setting, then the axes at larger
        micro-batches while larger is faster; stopped by a numeric failure, or before any probe by a state counted
        over the limit (no micro-batch or axis shrinks the state)."""
        alone = self.state_over_limit(base)
        if alone is not None:
            self.over_by_state(base, alone)
            return
        ascending, best_plain = self.plain_boundary(base)
        failed = self.unstable(base)
        if failed is not None:
            self.note_unstable(base, failed)
            return
        floor = next(i for i, s in enumerate(ascending) if s.micro_batch >= self.floor)
        best: ProbeResult | None = None
        larger_is_faster = True
        start = floor  # what fits is below the floor, or nothing fits: the axes from the floor up
        if best_plain is not None and ascending.index(best_plain) >= floor:
            start = ascending.index(best_plain) + 1
            best = self.results[best_plain]
            best, larger_is_faster = self.smaller_walk(ascending[floor:], start - 1 - floor, best)
        if not larger_is_faster:
            return
        for axis in _roles(roles.AXES):
            self.axis_search(axis, ascending[start:], best)

    def plain_boundary(self, base: Strategy) -> tuple[list[Strategy], Strategy | None]:
        """The setting's candidates with every axis off, smallest first, and the largest that fits (None: none
        does). Those below the micro-batch floor are among them only where measured before a probe told the floor
        (its first probe's facts): the boundary reads them but probes nothing below the floor, where no probe can be
        chosen. Where one of this boundary's own probes told the floor, the boundary stops and runs again, its probes
        reused (unless that probe was a numeric failure, which no micro-batch cures)."""
        every = [self.sized(base, m) for m in reversed(self.problem.micro_batches)]
        while True:
            floor = self.floor
            ascending = [s for s in every if s.micro_batch >= floor or s in self.results]
            found = self.boundary("accumulation", ascending)
            if self.floor == floor or self.unstable(base) is not None:
                return ascending, found

    def axis_search(self, axis: Mechanism, plains: list[Strategy], best: ProbeResult | None) -> None:
        """At each larger micro-batch, the least saving level of the axis that fits (predicted, verified), while
        that is faster than the best so far. Where speed rises smoothly with the micro-batch (GPUs) and the axis'
        cost is known, it jumps to the micro-batch predicted fastest. The last level found is refined at its own
        micro-batch: one level less saving is measured where the prediction did not already rule it out by a probe."""
        index, found_best = 0, None
        while index < len(plains):
            index = self.fastest_ahead(axis, plains, index, best)
            plain = plains[index]
            levels = axis.levels(plain, self)
            if not levels:
                break
            estimate, how = self.estimate_speed(levels), "predicted"
            if estimate is None:
                estimate, how = self.most_speed(levels), "at most"
            if best is not None and estimate is not None and estimate <= best.samples_per_sec * (1 + TIE):
                outer = plain.label(without=tuple(m.name for m in MECHANISMS if m.name not in roles.OUTER))
                self.note(f"{outer} micro-batch {plain.micro_batch} with {axis.name} not probed: "
                          f"{no_faster(how, estimate, best.samples_per_sec)}")
                break
            found = self.boundary(axis.name, levels)
            failed = self.unstable(plain)
            if failed is not None:
                self.note_unstable(plain, failed)
                return
            if found is None:
                break  # even the most saving level does not fit: a larger micro-batch will not either
            result = axis.refine_level(found, self)
            if best is not None and result.samples_per_sec <= best.samples_per_sec * (1 + TIE):
                break  # the axis at a larger micro-batch is no faster
            best, found_best, index = result, (found, levels), index + 1
        if found_best is not None:
            self.refine_final(axis, *found_best)

    def fastest_ahead(self, axis: Mechanism, plains: list[Strategy], index: int, best: ProbeResult | None) -> int:
        """On a GPU, with the axis' cost measured: the index of the micro-batch ahead predicted fastest."""
        if not (self.problem.speed_rises_with_batch and best is not None):
            return index
        estimates = [(speed, i) for i, plain in enumerate(plains[index:], index)
                     if (levels := axis.levels(plain, self)) and (speed := self.estimate_speed(levels))]
        return max(estimates)[1] if estimates else index

    def refine_final(self, axis: Mechanism, found: Strategy, levels: list[Strategy]) -> None:
        """The fewest units of the axis that fit at the micro-batch chosen: one level less saving than found, where
        no probe has ruled it out and the prediction that stopped the boundary is within the model's error."""
        position = levels.index(found)
        if position + 1 >= len(levels) or levels[position + 1] in self.results:
            return
        predicted = self.predict(levels[position + 1])
        if predicted is None or predicted <= self.limit * (1 + REFINE_MARGIN):
            self.probe(axis.name, levels[position + 1])

    def smaller_walk(self, ascending: list[Strategy], index: int, best: ProbeResult) -> tuple[ProbeResult, bool]:
        """Does a smaller micro-batch train faster? (It often does on CPUs.) Walk down the candidates (from the
        floor up) while it does; then try the smallest one too, since CPU throughput need not be monotonic.
        On a device whose speed rises with the micro-batch, the smallest is tried only after the walk improved,
        and a step predicted to be no faster is not probed.
        Returns (the best, whether larger micro-batches were faster)."""
        improved = False
        if self.problem.speed_rises_with_batch and index > 0:
            predicted = self.speed(best.strategy).plain(ascending[index - 1].micro_batch)
            if predicted is not None and predicted <= best.samples_per_sec * (1 + TIE):
                return best, True
        while index > 0:
            smaller = self.probe("throughput", ascending[index - 1])
            if not (smaller.fits and smaller.samples_per_sec > best.samples_per_sec * (1 + TIE)):
                break
            best, index, improved = smaller, index - 1, True
        if (improved or not self.problem.speed_rises_with_batch) and index > 1:
            smallest = self.probe("throughput", ascending[0])
            if smallest.fits and smallest.samples_per_sec > best.samples_per_sec * (1 + TIE):
                best, improved = smallest, True
        return best, not improved

    def estimate_speed(self, levels: list[Strategy]) -> float | None:
        """Predicted samples/s of the least saving level predicted to fit at one micro-batch: its speed with the
        axis off (measured: over-budget probes still report it; or modelled where speed rises with the batch)
        less the measured cost per unit of the axis."""
        found = self.least_saving_fit(levels, self.predict)
        return None if found is None else self.speed(levels[0]).predict(*found)

    def most_speed(self, levels: list[Strategy]) -> float | None:
        """The most samples/s an axis' levels at one micro-batch can reach before its memory saving and cost are
        measured: the least saving level that could fit (each unit saving the most it can) at the least the axis
        can cost (Mechanism.largest_coefficient, least_cost)."""
        found = self.least_saving_fit(levels, self.least)
        if found is None:
            return None
        level, measured = found
        least = sum(axis.least_cost(level, self.facts) for axis in _roles(roles.AXES))
        return self.speed(levels[0]).bound(level, least, measured)

    def least_saving_fit(self, levels: list[Strategy], peak: Callable[[Strategy], float | None]) \
            -> tuple[Strategy, float | None] | None:
        """The least saving level whose `peak` fits, and the speed measured with the axis off (levels[-1]); None
        when none fits, or when nothing is measured and speed is not modelled as rising with the batch."""
        plain = self.results.get(levels[-1])
        measured = plain.samples_per_sec if plain is not None else None
        if not measured and not self.problem.speed_rises_with_batch:
            return None
        fitting = [s for s in levels if (peak(s) or float("inf")) <= self.limit]
        return (fitting[-1], measured) if fitting else None

    def finish(self) -> Outcome:
        probes = list(self.results.values())
        floor, why = self.floor_and_why()
        chosen = choose(probes, floor)
        below = [r for r in probes if r.fits and r.strategy.micro_batch < floor]
        if below:  # measured before a probe told the floor, or saved by an earlier run
            fastest = max(below, key=lambda r: r.samples_per_sec)
            self.note(f"micro-batch floor {floor} applied ({why}); the fastest below it: "
                      f"{fastest.strategy.label()} at {fastest.samples_per_sec:.1f} samples/s")
        elif why and floor > self.problem.micro_batches[-1] and self.stopped_at_floor(chosen, floor):
            self.note(f"micro-batch floor {floor} applied ({why}); nothing below it probed")
        outcome = Outcome(chosen, probes, self.notes)
        if chosen is None:  # the closest miss a larger budget would make a choice: over it, at the floor or above
            misses = [r for r in probes if (r.used_bytes or 0) > self.limit and r.strategy.micro_batch >= floor]
            outcome.closest = min(misses, key=lambda r: r.used_bytes or 0) if misses else None
            outcome.suggestions = self.suggest(outcome.closest)
        return outcome

    def stopped_at_floor(self, chosen: ProbeResult | None, floor: int) -> bool:
        """The search came down to the floor and would have gone on below it: nothing fits, or the floor is chosen."""
        reached = any(s.micro_batch == floor for s in self.results)
        return reached and (chosen is None or chosen.strategy.micro_batch == floor)

    def suggest(self, closest: ProbeResult | None) -> list[str]:
        """What would make the closest miss fit."""
        tips = []
        if closest is not None:
            needed = self.problem.budget.needed_for(closest.used_bytes)
            tips.append(f"a budget of {format_bytes(needed, up=True)} (at least {needed} bytes), under which the "
                        f"closest measured, {closest.strategy.label()}, fits")
        elif self.least_state is not None:
            needed = self.problem.budget.needed_for(int(self.least_state))
            tips.append(f"a budget of more than {format_bytes(needed, up=True)} ({needed} bytes): the "
                        f"least counted state (weights, gradients and optimizer state) alone takes "
                        f"{self.least_state / GiB:.2f} GiB per rank, before any activation; fewer trainable "
                        "parameters or more ranks to partition it over shrink it")
        for mechanism in MECHANISMS:
            tips.extend(mechanism.suggest(self))
        tips.append("a shorter sequence / smaller images, or a smaller model")
        return tips


def no_faster(how: str, estimate: float, best: float) -> str:
    """Why a configuration predicted no faster than the best measured is not probed: slower, or faster by less
    than a tie (where the simpler configuration is chosen)."""
    if estimate <= best:
        return f"{how} {estimate:.1f} samples/s, no faster than the best measured {best:.1f}"
    return (f"{how} {estimate:.1f} samples/s, within {TIE:.0%} of the best measured {best:.1f} (where the simpler "
            "configuration is chosen)")
