"""The tuning ladder. Pure: it only calls a `measure(strategy) -> ProbeResult` function.

Ladder: plain (fp32, the whole target batch at once) -> AMP at the whole batch (O2, then O1) -> gradient
accumulation -> per-block recompute. Each rung runs only when the cheaper ones did not reach the target. Probes are
costly, so memory is predicted (search.memory) before it is measured; a boundary is found by jumping to the
predicted edge and verifying it. Throughput is measured, not assumed: a smaller micro-batch is probed while
it keeps getting faster, and a larger micro-batch with recompute while that keeps getting faster.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from vramtune.mechanisms.accumulation import BATCHNORM_FLOOR
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
    devices: int = 1  # data-parallel ranks (the target batch is over all of them)
    sharding_stages: list[int] = field(default_factory=lambda: [0])  # stages the device can run
    skipped: dict[str, str] = field(default_factory=dict)  # what else the device cannot run, and why
    min_micro_batch: int | None = None  # the spec's floor; None: BATCHNORM_FLOOR for BatchNorm models
    to_static: bool = True  # try paddle.jit.to_static at the best configuration


@dataclass
class Outcome:
    chosen: ProbeResult | None
    probes: list[ProbeResult]
    notes: list[str]
    closest: ProbeResult | None = None
    suggestions: list[str] = field(default_factory=list)


def plan(precision: str, micro_batch: int, target: int, devices: int = 1) -> Strategy:
    """The strategy reaching `target` samples per step with this micro-batch on `devices` ranks."""
    return Strategy(precision=precision, micro_batch=micro_batch, accumulation=target // devices // micro_batch,
                    devices=devices)


class Tuner:
    """Runs the ladder over a measure function, keeping every probe in order."""

    def __init__(self, measure: Measure, problem: SearchProblem, progress: Progress | None = None):
        self.measure, self.problem = measure, problem
        self.progress = progress or (lambda rung, strategy, result: None)
        self.results: dict[Strategy, ProbeResult] = {}
        self.notes: list[str] = []
        self.blocks = 0  # L, learned from the first probe
        self.native: dict | None = None  # a model's own recompute: {granularities, partial}, from the first probe
        self.batchnorm = 0  # BatchNorm layers, from the first probe

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
        if result.batchnorm_layers:
            self.batchnorm = result.batchnorm_layers
        return result

    @property
    def floor(self) -> int:
        """The smallest micro-batch that may be chosen (BatchNorm models: BATCHNORM_FLOOR unless the spec says)."""
        floor = self.problem.min_micro_batch or (BATCHNORM_FLOOR if self.batchnorm else 1)
        return min(floor, self.problem.micro_batches[0])

    def best(self) -> ProbeResult | None:
        return choose(self.results.values(), self.floor)

    def stop_if_every_probe_fails_alike(self) -> None:
        """No memory advice for a failure that has nothing to do with memory (a Paddle API missing, a bug)."""
        results = list(self.results.values())
        errors = {non_memory_failure(r) for r in results}
        if len(results) >= SAME_FAILURES and len(errors) == 1 and None not in errors:
            raise BuildFailure(f"every probe failed the same way, not for lack of memory: {errors.pop()}")

    def model(self, strategy: Strategy) -> MemoryModel:
        group = memory_group(strategy)
        mine = {s: r for s, r in self.results.items() if memory_group(s) == group}  # O2 counts other parts
        counts = {part: max((getattr(r, f"{part}_bytes") or 0 for r in mine.values()), default=0)
                  for part in ("weight", "gradient", "optimizer")}  # the largest: an unpartitioned rank's
        # the intercept of the line fitted as if unsaved: the whole state, as one unpartitioned rank counts it
        return MemoryModel(((s, r.used_bytes) for s, r in mine.items() if r.measured and r.used_bytes),
                           fixed_bytes=sum(counts.values()) or None, counts=counts)

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
        skipped: dict[str, list[str]] = {}  # why -> the precisions skipped for it
        for precision in problem.amp_precisions:
            if precision in problem.unsupported:
                skipped.setdefault(problem.unsupported[precision], []).append(precision)
        self.notes.extend(f"{', '.join(precisions)} skipped: {why}" for why, precisions in skipped.items())
        self.notes.extend(f"{what} skipped: {why}" for what, why in problem.skipped.items())
        largest = sizes[0]
        whole = largest * problem.devices == target  # the whole batch in one micro-batch per rank
        if self.probe("plain", plan("fp32", largest, target, problem.devices)).fits and whole:
            return self.finish()
        if whole:
            self.sharded_whole_batch(plan("fp32", largest, target, problem.devices))
            for precision in amp:
                result = self.probe("amp", plan(precision, largest, target, problem.devices))
                if result.status in ("oom", "over_budget"):
                    break  # least memory first (O2, then O1): the next one would not fit either
            if self.best():
                return self.finish()
        for precision in [*amp, "fp16-safe", "fp32"]:
            if precision == "fp16-safe" and not self.fp16_unstable():
                continue
            best = self.best()
            if best is None or self.could_win(precision, best):
                for stage in problem.sharding_stages:
                    if stage == 0 or self.sharding_helps(precision, stage):
                        self.deep_search(precision, stage)
        self.try_static()
        return self.finish()

    def fp16_unstable(self) -> bool:
        """fp16 (O1 or O2) went non-finite and never trained stably: then fp16 with overflow-prone ops kept in
        fp32."""
        fp16 = [r for s, r in self.results.items() if s.precision in ("fp16", "fp16-o2")]
        if any(r.status == "unstable" for r in fp16) and not any(r.fits for r in fp16):
            self.notes.append("fp16 was unstable (non-finite loss): trying fp16-safe (overflow-prone ops in fp32)")
            return True
        return False

    def try_static(self) -> None:
        """to_static at the best configuration: a static graph may reuse memory more (and here it often runs
        faster: a CPU BERT 1.2-1.4x, with a few MiB more). Where the best needed recompute, its measured memory
        saving may let the same micro-batch run without it."""
        best = self.best()
        if not self.problem.to_static or best is None or best.strategy.to_static:
            return
        static = self.probe("static", best.strategy.with_(to_static=True))
        if static.status == "unsupported":
            self.notes.append(f"to_static skipped: {static.error}")
            return
        plain = self.results.get(best.strategy.with_(recomputed_blocks=0))
        if static.used_bytes and plain is not None and plain.used_bytes and best.strategy.recomputed_blocks and \
                plain.used_bytes - (best.used_bytes - static.used_bytes) <= self.problem.budget.limit:
            self.probe("static", plain.strategy.with_(to_static=True))

    def sharded_whole_batch(self, whole: Strategy) -> None:
        """With several ranks, the whole batch with the state partitioned, lowest stage first. The first stage is
        measured (it also shows what data parallel's own buffers cost); higher stages only where predicted to fit
        from the counted weight, gradient and optimizer bytes."""
        for index, stage in enumerate(self.problem.sharding_stages[1:]):
            sharded = whole.with_(sharding_stage=stage)
            predicted = self.predict(sharded)
            hopeful = predicted is None or predicted <= self.problem.budget.limit * (1 + NEIGHBOUR_MARGIN)
            if (index == 0 or hopeful) and self.probe("sharding", sharded).fits:
                return

    def sharding_helps(self, precision: str, stage: int) -> bool:
        """Whether partitioning the state lets a larger micro-batch fit than without (predicted)."""
        target, devices = self.problem.target_batch, self.problem.devices
        fitting = [s.micro_batch for s, r in self.results.items() if r.fits and s.precision == precision
                   and not s.recomputed_blocks]
        larger = [m for m in self.problem.micro_batches if m > max(fitting, default=0)]
        if not larger:
            return False
        candidate = plan(precision, min(larger), target, devices).with_(sharding_stage=stage)
        predicted = self.predict(candidate)
        return predicted is None or predicted <= self.problem.budget.limit

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

    def deep_search(self, precision: str, stage: int = 0) -> None:
        """Accumulation, then recompute, for one precision (and sharding stage), following measured throughput."""
        target = self.problem.target_batch
        ascending = [plan(precision, m, target, self.problem.devices).with_(sharding_stage=stage)
                     for m in reversed(self.problem.micro_batches)]
        best_plain = self.boundary("accumulation", ascending)
        best: ProbeResult | None = None
        larger_is_faster = True
        start = 0
        floor = next(i for i, s in enumerate(ascending) if s.micro_batch >= self.floor)
        if best_plain is not None and ascending.index(best_plain) >= floor:
            start = ascending.index(best_plain) + 1
            best = self.results[best_plain]
            best, larger_is_faster = self.smaller_walk(ascending, ascending.index(best_plain), best, floor)
        elif best_plain is not None:  # what fits is below the floor: recompute from the floor up
            start = floor
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

    def smaller_walk(self, ascending: list[Strategy], index: int, best: ProbeResult,
                     floor: int = 0) -> tuple[ProbeResult, bool]:
        """Does a smaller micro-batch train faster? (It often does on CPUs.) Walk down while it does, not below the
        candidate at index `floor`; then try that smallest one too, since CPU throughput need not be monotonic
        (BERT-mini on a 2-core CPU: m=4 slower than m=8, m=1 8% faster than both). On a device whose speed rises
        with the micro-batch, the smallest is tried only after the walk improved, and a step predicted to be no
        faster is not probed.
        Returns (the best, whether larger micro-batches were faster)."""
        improved = False
        if self.problem.speed_rises_with_batch and index > floor:
            predicted = self.speed(best.strategy.precision).plain(ascending[index - 1].micro_batch)
            if predicted is not None and predicted <= best.samples_per_sec * (1 + TIE):
                return best, True
        while index > floor:
            smaller = self.probe("throughput", ascending[index - 1])
            if not (smaller.fits and smaller.samples_per_sec > best.samples_per_sec * (1 + TIE)):
                break
            best, index, improved = smaller, index - 1, True
        if index == floor > 0 and (improved or not self.problem.speed_rises_with_batch):
            self.probe("below floor", ascending[floor - 1])  # what the floor costs, for the report
        if (improved or not self.problem.speed_rises_with_batch) and index > floor + 1:
            smallest = self.probe("throughput", ascending[floor])
            if smallest.fits and smallest.samples_per_sec > best.samples_per_sec * (1 + TIE):
                best, improved = smallest, True
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
        chosen = choose(probes, self.floor)
        below = [r for r in probes if r.fits and r.strategy.micro_batch < self.floor]
        if below:
            fastest = max(below, key=lambda r: r.samples_per_sec)
            why = (f"the model has {self.batchnorm} BatchNorm layers, whose statistics over fewer samples are noisy"
                   if not self.problem.min_micro_batch else "search.min_micro_batch")
            self.notes.append(f"micro-batch floor {self.floor} applied ({why}); the fastest below it: "
                              f"{fastest.strategy.label()} at {fastest.samples_per_sec:.1f} samples/s")
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
        if problem.unsupported:
            tips.append("AMP (fp16/bf16, O1 or O2) on a GPU, which roughly halves activation memory")
        tips.append("a shorter sequence / smaller images, or a smaller model")
        return tips
