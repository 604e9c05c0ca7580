"""The search's memory side: what a strategy takes, predicted before it is probed. From its memory group's probes
(the memory model, memory/line.py); before any, from another precision's measured activations scaled by the stated
factors (the prior); before any probe measured activations, from the state counted before the first probe plus the
activations predicted from the model's config.json (the activation prior, docs/search.md). It only places probes
and rules out those that cannot fit or would fail without figures; the search reads it, never decides by it alone."""
from __future__ import annotations

import math
from collections.abc import Mapping

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Facts, Strategy
from vramtune.mechanisms.base import MemoryEffect
from vramtune.memory.counted import PARTS
from vramtune.memory.line import MemoryModel, memory_group
from vramtune.memory.prior import PRIOR_ERROR, PRIOR_MARGIN
from vramtune.memory.state import Factors
from vramtune.search.problem import SearchProblem
from vramtune.search.roles import Roles


class Prediction:
    """Predicts from the probes measured so far (`results`, the record's, read live) and what they learned
    (`facts`)."""

    def __init__(self, problem: SearchProblem, roles: Roles, results: Mapping[Strategy, ProbeResult], facts: Facts):
        self.problem, self.roles, self.results, self.facts = problem, roles, results, facts
        self.prior_missed = False  # a probe the activation prior placed failed without figures: it is not used again

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
        return alone if alone is not None and alone > self.problem.limit else None

    # -- the activations predicted before any probe ------------------------------------------------------
    def activation_prior(self, strategy: Strategy, factor: float = 1 + PRIOR_MARGIN) -> float | None:
        """Before any probe measured activations, a strategy with every axis off: its counted state plus the
        activations per sample predicted from the model (SearchProblem.activations, x `factor`: by default the
        safety margin a placement keeps) scaled by the stated factors (`stated_scale`). None without a
        prediction or a count; once a probe measured activations (then another precision's, scaled, predict a
        group not yet measured: prior) or a probe it placed failed without figures; and on a CPU, whose probes
        report their figures even over the budget (a CPU run never waits for the count)."""
        if self.problem.activations is None or self.prior_missed or self.roles.without_axes(strategy) != strategy \
                or self.problem.device.kind == "cpu" or strategy.tensor_parallel > 1:  # config.json's: one whole rank
            return None
        if any(result.used_bytes for result in self.results.values()):
            return None  # activations measured: another precision's, scaled (prior), say more than config.json
        model = self.memory_model(strategy)
        if not model.fixed:
            return None
        scale = math.prod(stated_scale(m, strategy) or 1.0 for m in self.roles.all)
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
        return least if least is not None and least > self.problem.cap else None

    # -- the memory model of the probes --------------------------------------------------------------------
    def unpartitioned(self, strategy: Strategy) -> Strategy:
        """The strategy as one rank that keeps its whole state: only the mechanisms that set its memory group on."""
        return Strategy(**{f.name: getattr(strategy, f.name) if m.memory_group(strategy) else f.default
                           for m in self.roles.all for f in m.fields})

    def memory_model(self, strategy: Strategy) -> MemoryModel:
        mechanisms = self.roles.all
        group = memory_group(mechanisms, strategy)
        mine = {s: r for s, r in self.results.items() if memory_group(mechanisms, s) == group}  # O2 counts others
        reported = {part: max((getattr(r, f"{part}_bytes") or 0 for r in mine.values()), default=0)
                    for part in PARTS}  # the largest: an unpartitioned rank's
        counted = {} if any(reported.values()) else self.counted(self.unpartitioned(strategy)) or {}
        counts = {part: counted.get(part, 0.0) for part in PARTS} if counted else reported
        # the intercept of the line fitted as if unsaved: the whole state, as one unpartitioned rank counts it (what
        # the probes report, else what was counted, with the mechanisms' own parts: O1's copies)
        return MemoryModel(mechanisms, ((s, r.used_bytes) for s, r in mine.items() if r.measured and r.used_bytes),
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
        (another precision), scaled by the stated factors (`stated_scale`)."""
        own = self.memory_model(strategy)
        mechanisms = self.roles.all
        for mechanism in mechanisms:
            scale = stated_scale(mechanism, strategy)
            for field_ in mechanism.fields if scale else ():
                for value in field_.choices or ():
                    other = strategy.with_(**{field_.name: value})
                    model = self.memory_model(other)
                    if memory_group(mechanisms, other) == memory_group(mechanisms, strategy) or not model.points:
                        continue
                    predicted, theirs = model.predict(other), stated_scale(mechanism, other)
                    if predicted is not None and theirs:
                        state = own.fixed or model.a
                        return state + (predicted - model.a) * scale / theirs - own.known_saving(strategy)
        return self.activation_prior(strategy)

    def expected(self, strategy: Strategy) -> float | None:
        """Its predicted bytes: from its memory group's probes, or before any, the prior."""
        model = self.memory_model(strategy)
        return model.predict(strategy) if model.points else self.prior(strategy)

    def least(self, strategy: Strategy) -> float | None:
        """The fewest bytes the strategy can take (the prior: each mechanism saving the most it can)."""
        model = self.memory_model(strategy)
        return model.least(strategy, self.largest(model))


def stated_scale(mechanism: MemoryEffect, strategy: Strategy) -> float | None:
    """A mechanism's activation bytes over those with it off by the estimate's stated factors (AMP O1 ~0.55, O2
    ~0.5), where it changes activations by a factor (its own `activation_factor`); None where it does not: a prior for
    a memory group not yet measured, from another group's measured activations."""
    if type(mechanism).activation_factor is MemoryEffect.activation_factor:
        return None
    return mechanism.activation_factor(strategy, Factors())
