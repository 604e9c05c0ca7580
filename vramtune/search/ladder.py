"""The tuning ladder. Pure: it only calls a `measure(strategy) -> ProbeResult` function.

Ladder: plain (fp32, the whole target batch at once) -> AMP at the whole batch -> gradient accumulation ->
per-block recompute. Each rung runs only when the cheaper ones did not reach the target. Probes are
costly, so memory is predicted (search.memory) before it is measured; a boundary is found by jumping to the
predicted edge and verifying it. Throughput is measured, not assumed: a smaller micro-batch is probed while
it keeps getting faster, and a larger micro-batch with recompute while that keeps getting faster.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from vramtune.records import Budget, ProbeResult
from vramtune.search.choice import TIE, choose
from vramtune.search.memory import MemoryModel, memory_group
from vramtune.search.speed import SpeedModel
from vramtune.strategy import Strategy

Measure = Callable[[Strategy], ProbeResult]
Progress = Callable[[str, Strategy, "ProbeResult | None"], None]  # (rung, strategy, None before / result after)

NEIGHBOUR_MARGIN = 0.03  # a neighbour predicted over the limit by more than this is not probed


class BuildFailure(Exception):
    """The model cannot be built at all: every probe would fail the same way, so tuning stops."""


SAME_FAILURES = 2  # this many probes failing alike, with nothing measured, stop the tuning


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
    amp_precisions: list[str] = field(default_factory=list)  # allowed by the spec
    unsupported: dict[str, str] = field(default_factory=dict)  # precision -> why the device cannot run it
    recompute: bool = True
    max_accumulation: int = 64
    speed_rises_with_batch: bool = False  # GPUs: throughput rises with the micro-batch and saturates


@dataclass
class Outcome:
    chosen: ProbeResult | None
    probes: list[ProbeResult]
    notes: list[str]
    closest: ProbeResult | None = None
    suggestions: list[str] = field(default_factory=list)


def plan(precision: str, micro_batch: int, target: int, recomputed_blocks: int = 0) -> Strategy:
    return Strategy(precision=precision, micro_batch=micro_batch, accumulation=target // micro_batch,
                    recomputed_blocks=recomputed_blocks)


class Tuner:
    """Runs the ladder over a measure function, keeping every probe in order."""

    def __init__(self, measure: Measure, problem: SearchProblem, progress: Progress | None = None):
        self.measure, self.problem = measure, problem
        self.progress = progress or (lambda rung, strategy, result: None)
        self.results: dict[Strategy, ProbeResult] = {}
        self.notes: list[str] = []
        self.blocks = 0  # L, learned from the first probe
        self.native: dict | None = None  # a model's own recompute: {granularities, partial}, from the first probe

    # -- probing ---------------------------------------------------------------------------------------
    def probe(self, rung: str, strategy: Strategy) -> ProbeResult:
        if strategy in self.results:
            return self.results[strategy]
        self.progress(rung, strategy, None)
        result = self.measure(strategy)
        result.rung = result.rung or rung
        self.results[strategy] = result
        self.progress(rung, strategy, result)
        if result.error_kind == "build":
            raise BuildFailure(result.error or "the model cannot be built")
        self.stop_if_every_probe_fails_alike()
        if result.total_blocks:
            self.blocks = max(self.blocks, result.total_blocks)
        if result.recompute_options:
            self.native = result.recompute_options
        return result

    def stop_if_every_probe_fails_alike(self) -> None:
        """No memory advice for a failure that has nothing to do with memory (a Paddle API missing, a bug)."""
        results = list(self.results.values())
        errors = {non_memory_failure(r) for r in results}
        if len(results) >= SAME_FAILURES and len(errors) == 1 and None not in errors:
            raise BuildFailure(f"every probe failed the same way, not for lack of memory: {errors.pop()}")

    def model(self, strategy: Strategy) -> MemoryModel:
        group = memory_group(strategy)
        counted = [r.state_bytes for r in self.results.values() if r.state_bytes]
        return MemoryModel(((s, r.used_bytes) for s, r in self.results.items()
                            if memory_group(s) == group and r.measured and r.used_bytes),
                           fixed_bytes=sum(counted) / len(counted) if counted else None)

    def predict(self, strategy: Strategy) -> float | None:
        return self.model(strategy).predict(strategy)

    def speed(self, precision: str) -> SpeedModel:
        return SpeedModel(self.results, precision, modelled_base=self.problem.speed_rises_with_batch)

    def boundary(self, rung: str, candidates: list[Strategy]) -> Strategy | None:
        """The last candidate that fits, for candidates ordered by increasing memory (predict, verify, correct)."""
        limit = self.problem.budget.limit
        low, high = -1, len(candidates)
        for index, strategy in enumerate(candidates):
            if strategy in self.results:
                if self.results[strategy].status == "fits":
                    low = max(low, index)
                else:
                    high = min(high, index)
        while high - low > 1:
            model = self.model(candidates[0])
            predicted = [model.predict(s) for s in candidates]
            inside = range(low + 1, high)
            hopeful = [i for i in inside if predicted[i] is not None and predicted[i] <= limit]
            if hopeful:
                index = max(hopeful)
            elif all(predicted[i] is None for i in inside):
                index = (low + high) // 2 if low >= 0 or high < len(candidates) else low + 1  # bisect
            else:
                index = low + 1
                if low >= 0 and predicted[index] is not None and predicted[index] > limit * (1 + NEIGHBOUR_MARGIN):
                    break  # the next one up is confidently over the budget
            if self.probe(rung, candidates[index]).status == "fits":
                low = index
            else:
                high = index
        return candidates[low] if low >= 0 else None

    # -- the ladder ------------------------------------------------------------------------------------
    def run(self) -> Outcome:
        problem = self.problem
        target, sizes = problem.target_batch, problem.micro_batches
        amp = [p for p in problem.amp_precisions if p not in problem.unsupported]
        for precision in problem.amp_precisions:
            if precision in problem.unsupported:
                self.notes.append(f"{precision} skipped: {problem.unsupported[precision]}")
        largest = sizes[0]
        if self.probe("plain", plan("fp32", largest, target)).fits and largest == target:
            return self.finish()
        if largest == target:
            for precision in amp:
                if self.probe("amp", plan(precision, largest, target)).status in ("oom", "over_budget"):
                    break  # fp16 and bf16 take the same bytes: the next one would not fit either
            if choose(self.results.values()):
                return self.finish()
        for precision in [*amp, "fp32"]:
            best = choose(self.results.values())
            if best is None or self.could_win(precision, best):
                self.deep_search(precision)
        return self.finish()

    def could_win(self, precision: str, best: ProbeResult) -> bool:
        """Whether searching `precision` deep can beat the best so far: measured at the best's configuration (with
        every block recomputed when that does not fit, and the cost of recompute taken off again)."""
        same = self.probe("compare", best.strategy.with_(precision=precision))
        speed = same.samples_per_sec
        extra = self.blocks - same.strategy.recomputed_blocks
        if not speed and extra > 0:
            recomputed = self.probe("compare", same.strategy.with_(recomputed_blocks=self.blocks))
            cost = self.speed(precision).recompute_cost
            if recomputed.samples_per_sec and cost is not None:
                speed = recomputed.samples_per_sec / max(1e-9, 1 - cost * extra)
        if speed is None:
            return True
        if speed > best.samples_per_sec * (1 + TIE):
            return True
        self.notes.append(f"{precision} not searched further: {speed:.1f} samples/s at "
                          f"{best.strategy.with_(precision=precision).label()}, no faster than "
                          f"{best.strategy.label()} at {best.samples_per_sec:.1f}")
        return False

    def deep_search(self, precision: str) -> None:
        """Accumulation, then recompute, for one precision, following measured throughput."""
        target = self.problem.target_batch
        ascending = [plan(precision, m, target) for m in reversed(self.problem.micro_batches)]
        best_plain = self.boundary("accumulation", ascending)
        best: ProbeResult | None = None
        larger_is_faster = True
        start = 0
        if best_plain is not None:
            start = ascending.index(best_plain) + 1
            best = self.results[best_plain]
            best, larger_is_faster = self.smaller_walk(ascending, ascending.index(best_plain), best)
        if not (self.problem.recompute and larger_is_faster):
            return
        if self.blocks == 0:
            self.notes.append("recompute skipped: no repeated blocks found (set model.block_path)")
            return
        for plain in ascending[start:]:
            levels = self.recompute_levels(plain)
            estimate = self.estimate_speed(levels)
            if best is not None and estimate is not None and estimate <= best.samples_per_sec * (1 + TIE):
                self.notes.append(f"{precision} micro-batch {plain.micro_batch} with recompute not probed: "
                                  f"predicted {estimate:.1f} samples/s, no faster than the best measured "
                                  f"{best.samples_per_sec:.1f}")
                break
            found = self.boundary("recompute", levels)
            if found is None:
                break  # even recomputing every block does not fit: a larger micro-batch will not either
            result = self.fastest_granularity(found)
            if best is not None and result.samples_per_sec <= best.samples_per_sec * (1 + TIE):
                break  # recompute at a larger micro-batch is no faster
            best = result

    def recompute_levels(self, plain: Strategy) -> list[Strategy]:
        """Recompute candidates at one micro-batch, by increasing memory: r = L .. 0 blocks; a model's own
        recompute without partial layers offers all or none, at its first granularity (GPT: core_attn only)."""
        granularity, counts = "full", range(self.blocks, -1, -1)
        if self.native:
            granularity = "full" if "full" in self.native["granularities"] else self.native["granularities"][0]
            if not self.native["partial"]:
                counts = [self.blocks, 0]
        return [plain.with_(recomputed_blocks=r, recompute_granularity=granularity if r else "full")
                for r in counts]

    def fastest_granularity(self, found: Strategy) -> ProbeResult:
        """A model's own recompute may offer cheaper granularities (full_attn, core_attn: they recompute less, save
        less): measured at every layer, at the micro-batch where recompute was needed."""
        best = self.results[found]
        if not (self.native and found.recomputed_blocks):
            return best
        for granularity in self.native["granularities"]:
            alternative = found.with_(recomputed_blocks=self.blocks, recompute_granularity=granularity)
            if alternative != found:
                other = self.probe("granularity", alternative)
                if other.fits and other.samples_per_sec > best.samples_per_sec:
                    best = other
        return best

    def smaller_walk(self, ascending: list[Strategy], index: int, best: ProbeResult) -> tuple[ProbeResult, bool]:
        """Does a smaller micro-batch train faster? (It often does on CPUs.) Walk down while it does; if it did at
        least once, also try the smallest, since CPU throughput need not be monotonic. On a device whose speed
        rises with the micro-batch, a step predicted to be no faster is not probed.
        Returns (the best, whether larger micro-batches were faster)."""
        improved = False
        if self.problem.speed_rises_with_batch and index > 0:
            predicted = self.speed(best.strategy.precision).plain(ascending[index - 1].micro_batch)
            if predicted is not None and predicted <= best.samples_per_sec * (1 + TIE):
                return best, True
        while index > 0:
            smaller = self.probe("throughput", ascending[index - 1])
            if not (smaller.fits and smaller.samples_per_sec > best.samples_per_sec * (1 + TIE)):
                break
            best, index, improved = smaller, index - 1, True
        if improved and index > 1:
            smallest = self.probe("throughput", ascending[0])
            if smallest.fits and smallest.samples_per_sec > best.samples_per_sec * (1 + TIE):
                best = smallest
        return best, not improved

    def estimate_speed(self, levels: list[Strategy]) -> float | None:
        """Predicted samples/s of the fewest recomputed blocks predicted to fit at one micro-batch: its speed without
        recompute (measured: over-budget probes still report it; or modelled where speed rises with the batch)
        less the measured cost per block."""
        plain = self.results.get(levels[-1])
        measured = plain.samples_per_sec if plain is not None else None
        if not measured and not self.problem.speed_rises_with_batch:
            return None
        fitting = [s for s in levels if (self.predict(s) or float("inf")) <= self.problem.budget.limit]
        if not fitting:
            return None
        return self.speed(levels[0].precision).predict(fitting[-1], measured)

    def finish(self) -> Outcome:
        probes = list(self.results.values())
        chosen = choose(probes)
        outcome = Outcome(chosen, probes, self.notes)
        if chosen is None:
            measured = [r for r in probes if r.used_bytes]
            outcome.closest = min(measured, key=lambda r: r.used_bytes) if measured else None
            outcome.suggestions = self.suggest(outcome.closest)
        return outcome

    def suggest(self, closest: ProbeResult | None) -> list[str]:
        """What would make the closest miss fit."""
        problem = self.problem
        tips = []
        if closest is not None:
            tips.append(f"a budget of at least {problem.budget.needed_for(closest.used_bytes)} bytes")
        smallest = problem.micro_batches[-1]
        if smallest > 1:
            tips.append(f"a smaller micro-batch: lower train.target_batch or raise search.max_accumulation "
                        f"(now {problem.max_accumulation}; the smallest micro-batch tried was {smallest})")
        if not problem.recompute and self.blocks:
            tips.append("recompute: set search.recompute to auto")
        if any(p in problem.unsupported for p in ("fp16", "bf16")):
            tips.append("AMP (fp16/bf16) on a GPU, which roughly halves activation memory")
        tips.append("a shorter sequence / smaller images, or a smaller model")
        return tips
