"""The tuning ladder and the memory model. Pure: it only calls a `measure(strategy) -> result` function.

Ladder: plain (fp32, the whole target batch at once) -> AMP at the whole batch -> gradient accumulation ->
per-block recompute. Each rung runs only when the cheaper ones did not reach the target. Probes are
costly, so memory is predicted before it is measured: peak ~ a + b*m at no recompute, and each recomputed
block saves about e*m (m = micro-batch). A boundary is found by jumping to the predicted edge and verifying it.
Throughput is measured, not assumed: a smaller micro-batch is probed while it keeps getting faster, and a
larger micro-batch with recompute while that keeps getting faster.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from vramtune.strategy import Strategy

Result = dict[str, Any]
Measure = Callable[[Strategy], Result]
Progress = Callable[[str, Strategy, "Result | None"], None]  # (rung, strategy, None before / result after)

TIE = 0.02  # throughputs within 2% are a tie: the simpler configuration wins
NEIGHBOUR_MARGIN = 0.03  # a neighbour predicted over the limit by more than this is not probed


class BuildFailure(Exception):
    """The model cannot be built at all: every probe would fail the same way, so tuning stops."""


@dataclass
class Problem:
    target_batch: int
    micro_batches: list[int]  # candidates that reach the target exactly, largest first
    budget_bytes: int
    headroom: float
    amp_precisions: list[str] = field(default_factory=list)  # allowed by the spec
    unsupported: dict[str, str] = field(default_factory=dict)  # precision -> why the device cannot run it
    recompute: bool = True
    max_accumulation: int = 64

    @property
    def limit_bytes(self) -> float:
        return self.budget_bytes * (1 - self.headroom)


@dataclass
class Outcome:
    chosen: Result | None
    probes: list[Result]
    notes: list[str]
    closest: Result | None = None
    suggestions: list[str] = field(default_factory=list)


def used_bytes(result: Result) -> int | None:
    """The memory that must fit: reserved on GPU, allocated on CPU."""
    return result.get("reserved_bytes") if result.get("reserved_bytes") is not None else result.get("peak_bytes")


def complexity(result: Result) -> tuple:
    """Fewer mechanisms first, then fewer recomputed blocks, then less accumulation."""
    mechanisms = (result["precision"] != "fp32") + (result["accumulation"] > 1) + (result["recompute_layers"] > 0)
    return mechanisms, result["recompute_layers"], result["accumulation"]


def choose(results: Iterable[Result]) -> Result | None:
    """The fitting result with the highest throughput; near-ties go to the simpler configuration."""
    fitting = [r for r in results if r["status"] == "fits" and r.get("samples_per_sec")]
    if not fitting:
        return None
    best = max(r["samples_per_sec"] for r in fitting)
    contenders = [r for r in fitting if r["samples_per_sec"] >= best * (1 - TIE)]
    return min(contenders, key=lambda r: (complexity(r), -r["samples_per_sec"]))


class MemoryModel:
    """peak(m, k, r) = a + b*m + g*[k == 1] - e*m*r, fitted to the measured probes of one precision.

    g: accumulating (k > 1) keeps the gradients alive during the next micro-batch's forward, so the plain
    (k = 1) probe sits off the line of the accumulating ones; it is fitted separately once two accumulating
    micro-batch sizes are measured.
    """

    def __init__(self, points: list[tuple[int, int, int, int]]):
        plain = [(m, k, used) for m, k, r, used in points if r == 0]
        accumulating = [(m, used) for m, k, used in plain if k > 1]
        self.g = 0.0
        if len({m for m, _ in accumulating}) >= 2:
            self.a, self.b = _affine(accumulating)
            single = [used - (self.a + self.b * m) for m, k, used in plain if k == 1]
            self.g = sum(single) / len(single) if single else 0.0
        else:
            self.a, self.b = _affine([(m, used) for m, _, used in plain])
        savings = [(self.predict(m, k, 0) - used) / (m * r) for m, k, r, used in points
                   if r > 0 and self.b is not None]
        self.e = max(0.0, sum(savings) / len(savings)) if savings else None

    def predict(self, micro_batch: int, accumulation: int, recompute_layers: int) -> float | None:
        if self.b is None:
            return None
        plain = self.a + self.b * micro_batch + (self.g if accumulation == 1 else 0.0)
        if recompute_layers == 0:
            return plain
        return None if self.e is None else plain - self.e * micro_batch * recompute_layers


def _affine(points: list[tuple[int, int]]) -> tuple[float, float | None]:
    """Least-squares a + b*m; with one micro-batch size, proportional (a = 0)."""
    if not points:
        return 0.0, None
    sizes = {m for m, _ in points}
    if len(sizes) == 1:
        return 0.0, sum(used for _, used in points) / sum(m for m, _ in points)
    n = len(points)
    mean_m = sum(m for m, _ in points) / n
    mean_u = sum(u for _, u in points) / n
    slope = sum((m - mean_m) * (u - mean_u) for m, u in points) / sum((m - mean_m) ** 2 for m, _ in points)
    return mean_u - slope * mean_m, max(slope, 0.0)


class Tuner:
    """Runs the ladder over a measure function, keeping every probe in order."""

    def __init__(self, measure: Measure, problem: Problem, progress: Progress | None = None):
        self.measure, self.problem = measure, problem
        self.progress = progress or (lambda rung, strategy, result: None)
        self.results: dict[Strategy, Result] = {}
        self.notes: list[str] = []
        self.blocks = 0  # L, learned from the first probe

    # -- probing ---------------------------------------------------------------------------------------
    def probe(self, rung: str, strategy: Strategy) -> Result:
        if strategy in self.results:
            return self.results[strategy]
        self.progress(rung, strategy, None)
        result = self.measure(strategy)
        result.setdefault("rung", rung)
        self.results[strategy] = result
        self.progress(rung, strategy, result)
        if result.get("error_kind") == "build":
            raise BuildFailure(result.get("error") or "the model cannot be built")
        if result.get("recompute_blocks"):
            self.blocks = max(self.blocks, result["recompute_blocks"])
        return result

    def model(self, precision: str) -> MemoryModel:
        return MemoryModel([(s.micro_batch, s.accumulation, s.recompute_layers, used_bytes(r))
                            for s, r in self.results.items()
                            if s.precision == precision and r["status"] in ("fits", "over_budget") and used_bytes(r)])

    def boundary(self, rung: str, candidates: list[Strategy]) -> Strategy | None:
        """The last candidate that fits, for candidates ordered by increasing memory (predict, verify, correct)."""
        limit = self.problem.limit_bytes
        low, high = -1, len(candidates)
        for index, strategy in enumerate(candidates):
            if strategy in self.results:
                if self.results[strategy]["status"] == "fits":
                    low = max(low, index)
                else:
                    high = min(high, index)
        while high - low > 1:
            model = self.model(candidates[0].precision)
            predicted = [model.predict(s.micro_batch, s.accumulation, s.recompute_layers) for s in candidates]
            inside = range(low + 1, high)
            hopeful = [i for i in inside if predicted[i] is not None and predicted[i] <= limit]
            if hopeful:
                index = max(hopeful)
            else:
                index = low + 1
                if low >= 0 and predicted[index] is not None and predicted[index] > limit * (1 + NEIGHBOUR_MARGIN):
                    break  # the next one up is confidently over the budget
            if self.probe(rung, candidates[index])["status"] == "fits":
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
        plain = Strategy("fp32", largest, target // largest, 0)
        if self.probe("plain", plain)["status"] == "fits" and largest == target:
            return self.finish()
        if largest == target:
            for precision in amp:
                self.probe("amp", Strategy(precision, largest, 1, 0))
            if choose(self.results.values()):
                return self.finish()
        for precision in [*amp, "fp32"]:
            self.deep_search(precision)
        return self.finish()

    def deep_search(self, precision: str) -> None:
        """Accumulation, then recompute, for one precision, following measured throughput."""
        target = self.problem.target_batch
        ascending = [Strategy(precision, m, target // m, 0) for m in reversed(self.problem.micro_batches)]
        best_plain = self.boundary("accumulation", ascending)
        best: Result | None = None
        larger_is_faster = True
        start = 0
        if best_plain is not None:
            index = ascending.index(best_plain)
            best = self.results[best_plain]
            start = index + 1
            while index > 0:  # does a smaller micro-batch train faster? (it often does on CPUs)
                smaller = self.probe("throughput", ascending[index - 1])
                if smaller["status"] == "fits" and smaller["samples_per_sec"] > best["samples_per_sec"] * (1 + TIE):
                    best, index, larger_is_faster = smaller, index - 1, False
                else:
                    break
        if not (self.problem.recompute and larger_is_faster):
            return
        if self.blocks == 0:
            self.notes.append("recompute skipped: no repeated blocks found (set model.recompute_blocks)")
            return
        for plain in ascending[start:]:
            layers = [Strategy(precision, plain.micro_batch, plain.accumulation, r)
                      for r in range(self.blocks, -1, -1)]
            estimate = self.estimate_speed(layers)
            if best is not None and estimate is not None and estimate <= best["samples_per_sec"] * (1 + TIE):
                self.notes.append(f"{precision} micro-batch {plain.micro_batch} with recompute not probed: "
                                  f"predicted {estimate:.1f} samples/s, no faster than the best measured "
                                  f"{best['samples_per_sec']:.1f}")
                break
            found = self.boundary("recompute", layers)
            if found is None:
                break  # even recomputing every block does not fit: a larger micro-batch will not either
            result = self.results[found]
            if best is not None and result["samples_per_sec"] <= best["samples_per_sec"] * (1 + TIE):
                break  # recompute at a larger micro-batch is no faster
            best = result

    def recompute_cost(self, precision: str) -> float | None:
        """Measured fraction of throughput lost per recomputed block, against the same micro-batch without."""
        costs = []
        for strategy, result in self.results.items():
            base = self.results.get(replace(strategy, recompute_layers=0)) or {}
            if (strategy.precision == precision and strategy.recompute_layers and result.get("samples_per_sec")
                    and base.get("samples_per_sec")):
                costs.append((1 - result["samples_per_sec"] / base["samples_per_sec"]) / strategy.recompute_layers)
        return sum(costs) / len(costs) if costs else None

    def estimate_speed(self, layers: list[Strategy]) -> float | None:
        """Predicted samples/s of the fewest recomputed blocks predicted to fit at one micro-batch: its measured
        speed without recompute (over-budget probes still report it) less the measured cost per block."""
        plain = self.results.get(layers[-1]) or {}
        cost = self.recompute_cost(layers[0].precision)
        if not plain.get("samples_per_sec") or cost is None:
            return None
        model = self.model(layers[0].precision)
        fitting = [s.recompute_layers for s in layers
                   if (model.predict(s.micro_batch, s.accumulation, s.recompute_layers) or float("inf"))
                   <= self.problem.limit_bytes]
        if not fitting:
            return None
        return plain["samples_per_sec"] * max(0.0, 1 - cost * min(fitting))

    def finish(self) -> Outcome:
        probes = list(self.results.values())
        chosen = choose(probes)
        outcome = Outcome(chosen, probes, self.notes)
        if chosen is None:
            measured = [r for r in probes if used_bytes(r)]
            outcome.closest = min(measured, key=used_bytes) if measured else None
            outcome.suggestions = self.suggest(outcome.closest)
        return outcome

    def suggest(self, closest: Result | None) -> list[str]:
        """What would make the closest miss fit."""
        problem = self.problem
        tips = []
        if closest is not None:
            needed = int(used_bytes(closest) / (1 - problem.headroom)) + 1
            tips.append(f"a budget of at least {needed} bytes")
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
