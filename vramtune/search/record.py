"""The search's record: every probe in the order measured, the notes, what the probes learned about the model, and
the one way a probe is run (`Record.probe`), which first rules out a strategy the prediction puts over the limit by
its counted state or past the cap by the activation prior (an unmeasured result, not kept)."""
from __future__ import annotations

from typing import Any

from vramtune.core.records import ProbeResult
from vramtune.core.spec import ranks
from vramtune.core.strategy import Facts, Strategy
from vramtune.memory.prior import PRIOR_ERROR
from vramtune.search.choice import choose, micro_batch_floor
from vramtune.search.prediction import Prediction
from vramtune.search.problem import BuildFailure, GiB, Measure, Progress, SearchProblem, non_memory_failure
from vramtune.search.roles import Roles

SAME_FAILURES = 2  # this many probes failing alike, with nothing measured, stop the tuning


class Record:
    """The probes of one search and what they told; the shared state the ladder's parts read and add to."""

    def __init__(self, measure: Measure, problem: SearchProblem, progress: Progress):
        self.measure, self.problem, self.progress = measure, problem, progress
        self.roles = Roles.of(problem.mechanisms)
        self.results: dict[Strategy, ProbeResult] = {}
        self.notes: list[str] = []
        self.learned: Facts = {}  # what the probes learned about the model
        self.least_state: float | None = None  # the least counted state of a setting not probed for it
        self.prediction = Prediction(problem, self.roles, self.results, self.learned)
        layout = self.problem.settings.get("tensor_parallel")  # the file's degree: kept by the search
        self.base = Strategy(devices=ranks(self.problem.settings),  # every mechanism off, the user's ranks set
                             **({"tensor_parallel": layout.degree, "sequence_parallel": layout.sequence}
                                if layout else {}))

    def settings(self, mechanism: str) -> Any:
        return self.problem.settings.get(mechanism)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- probing ---------------------------------------------------------------------------------------
    def probe(self, rung: str, strategy: Strategy) -> ProbeResult:
        if strategy in self.results:
            return self.results[strategy]
        prediction = self.prediction
        alone = prediction.state_over_limit(strategy)
        if alone is not None:
            return self.over_by_state(strategy, alone)
        least = prediction.prior_past_cap(strategy)
        if least is not None:
            return self.over_by_prior(strategy, least)
        placed = prediction.activation_prior(strategy)
        cannot = self.problem.model_unsupported(strategy) if self.problem.model_unsupported else None
        if cannot:  # measured all the same: the session says unsupported without a probe
            self.note(f"{self.roles.outer_label(strategy)} skipped: {cannot}")
        self.progress(rung, strategy, None)
        result = self.measure(strategy)
        result.rung = result.rung or rung
        self.results[strategy] = result
        self.progress(rung, strategy, result)
        if placed is not None and placed <= self.problem.limit and not result.fits and not result.used_bytes \
                and result.status != "unsupported":
            prediction.prior_missed = True
            self.note(f"the activations predicted from the model's config.json were too few: {strategy.label()}, "
                      "predicted to fit, failed without figures; the search went on without them")
        if result.error_kind == "build":
            raise BuildFailure(result.error or "the model cannot be built")
        self.stop_if_every_probe_fails_alike()
        self.learned.update(result.facts)
        return result

    def stop_if_every_probe_fails_alike(self) -> None:
        """No memory advice for a failure that has nothing to do with memory (a Paddle API missing, a bug)."""
        results = list(self.results.values())
        errors = {non_memory_failure(r) for r in results}
        if len(results) >= SAME_FAILURES and len(errors) == 1 and None not in errors:
            raise BuildFailure(f"every probe failed the same way, not for lack of memory: {errors.pop()}")

    def over_by_state(self, strategy: Strategy, alone: float) -> ProbeResult:
        """A strategy whose counted state alone is over the limit, not probed: an unmeasured result (not kept)."""
        limit = self.problem.limit
        self.least_state = min(alone, self.least_state or alone)
        self.note(f"{self.roles.outer_label(strategy)} not probed: its counted weights, gradients and optimizer state "
                  f"alone take {alone / GiB:.2f} GiB per rank, over the limit of {limit / GiB:.2f} GiB")
        return ProbeResult("oom", strategy, error="its counted state alone is over the limit", rung="counted")

    def over_by_prior(self, strategy: Strategy, least: float) -> ProbeResult:
        """A strategy the activation prior puts past the cap with room to spare, not probed: an unmeasured result
        (not kept)."""
        self.note(f"{strategy.label()} not probed: with {PRIOR_ERROR:g}x fewer activations than predicted from the "
                  f"model's config.json it would take {least / GiB:.2f} GiB, past the {self.problem.cap / GiB:.2f} GiB "
                  "a probe can use")
        return ProbeResult("oom", strategy, error="predicted past the cap", rung="prior")

    # -- what the probes tell ------------------------------------------------------------------------------
    def floor_and_why(self) -> tuple[int, str | None]:
        """The smallest micro-batch that may be chosen (a mechanism's floor, e.g. BatchNorm models), and why."""
        value, why = micro_batch_floor(self.roles.all, self.problem.settings, self.learned)
        return min(value, self.problem.micro_batches[0]), why

    @property
    def floor(self) -> int:
        return self.floor_and_why()[0]

    def best(self) -> ProbeResult | None:
        return choose(self.roles.all, self.results.values(), self.floor)

    def fitting_micro_batches(self, candidate: Strategy, varying: tuple[str, ...] = ()) -> list[int]:
        """Micro-batches measured to fit with the candidate's settings (but `varying`), every axis off."""
        skip = {"micro_batch", "accumulation", *varying}
        without_axes = self.roles.without_axes
        plain = without_axes(candidate)
        return [s.micro_batch for s, r in self.results.items() if r.fits and without_axes(s) == s and all(
            getattr(s, name) == value for name, value in plain.to_json().items() if name not in skip)]

    def unstable(self, base: Strategy) -> ProbeResult | None:
        """A probe of this outer setting whose loss went non-finite (or whose optimizer never stepped): smaller
        micro-batches and more recompute do not cure an overflow, so the setting is not searched further."""
        names = [f.name for m in self.roles.outer for f in m.fields]
        return next((r for s, r in self.results.items() if r.status == "unstable"
                     and all(getattr(s, name) == getattr(base, name) for name in names)), None)

    def note_unstable(self, base: Strategy, result: ProbeResult) -> None:
        more = " or ".join(axis.name for axis in self.roles.axes)
        self.note(f"{self.roles.outer_label(base)} not searched further: unstable at {result.strategy.label()} "
                  f"({result.error}); a smaller micro-batch{f' or more {more}' if more else ''} does not cure a "
                  "numeric failure")
