"""The tuning ladder. Pure: it only calls a `measure(strategy) -> ProbeResult` function.

At the whole batch first (plain, then the whole-batch mechanisms: AMP, sharding); then each combination of the outer
alternatives (search/outer.py), searched in depth where it could win: the largest micro-batch that fits (predicted,
verified, corrected on a miss: search/boundary.py), a walk to smaller micro-batches while they are faster, then the
axes at larger micro-batches while those are faster (search/throughput.py); then the refinements of the best; the
outcome last (search/outcome.py). Which mechanism plays which role is the ladder's data (search/roles.py); each
mechanism's own functions say what its alternatives, levels and refinements are (mechanisms/base.py), and see the
search as a `SearchView`: this Tuner. Every probe goes through the record (search/record.py); memory is predicted
before it is measured (search/prediction.py: what is known before a probe, each mechanism's bounds, another
precision's activations scaled by the stated AMP factors, the activation prior: docs/search.md), throughput is
measured, not assumed; predictions only place probes and rule out ones that cannot fit or cannot win.
"""
from __future__ import annotations

from typing import Any

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Facts, Strategy
from vramtune.mechanisms.base import Mechanism
from vramtune.search.outcome import finish
from vramtune.search.outer import Nesting
from vramtune.search.problem import Measure, Outcome, Progress, SearchProblem
from vramtune.search.record import Record
from vramtune.search.throughput import Throughput


class Tuner:
    """Runs the ladder over a measure function, keeping every probe in order (its record). Mechanisms' search
    functions see it (mechanisms.base.SearchView): they probe, predict, note and read their settings and facts
    through it."""

    def __init__(self, measure: Measure, problem: SearchProblem, progress: Progress | None = None):
        self.problem = problem
        self.record = Record(measure, problem, progress or (lambda rung, strategy, result: None))
        self.prediction = self.record.prediction
        self.throughput = Throughput(self, self.record)
        self.nesting = Nesting(self, self.record, self.throughput)

    # -- what mechanisms read and do (SearchView) ------------------------------------------------------------
    @property
    def results(self) -> dict[Strategy, ProbeResult]:
        return self.record.results

    @property
    def facts(self) -> Facts:
        """What the probes learned about the model."""
        return self.record.learned

    @property
    def base(self) -> Strategy:
        return self.record.base

    @property
    def limit(self) -> float:
        return self.problem.limit

    @property
    def floor(self) -> int:
        return self.record.floor

    def settings(self, mechanism: str) -> Any:
        return self.record.settings(mechanism)

    def note(self, text: str) -> None:
        self.record.note(text)

    def unsupported(self, strategy: Strategy) -> str | None:
        return self.problem.unsupported(strategy)

    def sized(self, strategy: Strategy, micro_batch: int) -> Strategy:
        return self.problem.sized(strategy, micro_batch)

    def without_axes(self, strategy: Strategy) -> Strategy:
        return self.record.roles.without_axes(strategy)

    def fitting_micro_batches(self, candidate: Strategy, varying: tuple[str, ...] = ()) -> list[int]:
        return self.record.fitting_micro_batches(candidate, varying)

    def probe(self, rung: str, strategy: Strategy) -> ProbeResult:
        return self.record.probe(rung, strategy)

    def predict(self, strategy: Strategy) -> float | None:
        return self.prediction.predict(strategy)

    def could_win(self, mechanism: Mechanism, candidate: Strategy) -> bool:
        return self.nesting.could_win(mechanism, candidate)

    # -- the ladder ------------------------------------------------------------------------------------
    def run(self) -> Outcome:
        roles = self.record.roles
        for mechanism in roles.all:
            for text in mechanism.notes(self):
                self.note(text)
        plain = self.sized(self.base, self.problem.micro_batches[0])
        whole = plain.accumulation == 1  # the whole batch at once per rank
        if self.probe("plain", plain).fits and whole:
            return self.finish()
        if whole:
            for mechanism in roles.whole_batch:
                mechanism.whole_batch(plain, self)
            if self.record.best():
                return self.finish()
        self.nesting.outer(0, self.base)
        for mechanism in roles.refine:
            best = self.record.best()
            if best is not None:
                mechanism.refine(best, self)
        return self.finish()

    def finish(self) -> Outcome:
        """The outcome of the probes so far (also after an interrupt)."""
        return finish(self, self.record)
