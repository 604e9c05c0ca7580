"""The memory model: peak(s) = a + b*m + sum_j c_j * x_j(s), one per memory group (fp32, AMP O1, AMP O2).

m is the micro-batch; x_j is mechanism j's memory term (accumulation: [k == 1], since accumulating keeps
the gradients alive during the next forward; recompute: -m*r, each recomputed block saving about c bytes
per sample). Probes are few, so the fit is staged rather than one least-squares: the base line from probes
where every term is 0, then each term from its probes' residuals.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from vramtune.core.strategy import Facts, Field, Strategy
from vramtune.memory.fitting import least_squares

Point = tuple[Strategy, int]  # (strategy, used bytes)


@dataclass(frozen=True)
class Term:
    """How a mechanism's coefficient in the fitted line behaves."""

    nonnegative: bool = True  # the fitted coefficient cannot be negative
    soft: bool = False  # taken as 0 while too few probes pin the base line down


class Fitted(Protocol):
    """What the fitted line asks of a mechanism (mechanisms/base.py declares each; memory/ is below the mechanisms,
    so they are given)."""

    name: str
    fields: tuple[Field, ...]
    term: Term | None
    shares_memory_group: bool

    def memory_term(self, strategy: Strategy) -> float: ...

    def memory_group(self, strategy: Strategy) -> str: ...

    def known_saving(self, strategy: Strategy, counts: dict[str, float]) -> float: ...

    def largest_coefficient(self, per_sample: float, facts: Facts) -> float | None: ...


def memory_group(mechanisms: Sequence[Fitted], strategy: Strategy) -> str:
    return "/".join(m.memory_group(strategy) for m in mechanisms)


def _affine(points: list[tuple[int, int]], fixed: float | None) -> tuple[float, float | None]:
    """Least-squares a + b*m; with one micro-batch size, a is the counted fixed bytes (or 0: proportional)."""
    if not points:
        return 0.0, None
    sizes = {m for m, _ in points}
    if len(sizes) == 1:
        a = min(fixed or 0.0, min(used for _, used in points))
        return a, sum(used - a for _, used in points) / sum(m for m, _ in points)
    fitted = least_squares(points)
    assert fitted is not None  # two sizes or more
    return fitted[0], max(fitted[1], 0.0)


def _grouped(mechanisms: Sequence[Fitted]) -> set[str]:
    """Fields whose values take the same bytes within their memory group (fp16 and bf16): probes of either lie on
    one line."""
    return {f.name for m in mechanisms if m.shares_memory_group for f in m.fields}


def _others(strategy: Strategy, varying: set[str]) -> tuple:
    """The strategy's values outside the `varying` fields."""
    return tuple(value for name, value in strategy.to_json().items() if name not in varying)


class MemoryModel:
    """Fitted to the measured probes of one memory group."""

    def __init__(self, mechanisms: Sequence[Fitted], points: Iterable[Point], fixed_bytes: float | None = None,
                 counts: dict[str, float] | None = None):
        """mechanisms: every mechanism, in registry order (those with a memory term are fitted). fixed_bytes: the
        weights, gradients and optimizer state counted by the probes, the line's intercept while only one micro-batch
        size is measured. counts (weight, gradient, optimizer bytes) give the savings that follow from sizes
        (sharding): points are fitted as if unsaved, predictions take the saving off."""
        self.mechanisms = tuple(mechanisms)
        self.counts = counts or {}
        self.fixed = fixed_bytes
        points = [(s, used + self.known_saving(s)) for s, used in points]
        terms = [m for m in self.mechanisms if m.term is not None]
        self.terms = terms
        self.coefficients: dict[str, float | None] = {m.name: None for m in terms}

        def only(point: Point, allowed: set[str]) -> bool:
            return all(m.name in allowed or m.memory_term(point[0]) == 0 for m in terms)

        base = [(s.micro_batch, used) for s, used in points if only((s, used), set())]
        soft = {m.name for m in terms if m.term.soft}
        if len({m for m, _ in base}) < 2:  # too few to pin the line: fit it through the soft terms as well
            base = [(s.micro_batch, used) for s, used in points if only((s, used), soft)]
            for name in soft:
                self.coefficients[name] = 0.0
        self.a, self.b = _affine(base, fixed_bytes)
        for mechanism in sorted(terms, key=lambda m: not m.term.soft):
            if self.coefficients[mechanism.name] is not None:
                continue
            fitted = {name for name, value in self.coefficients.items() if value is not None}
            ratios = [(used - self._predict(s, exclude=mechanism.name)) / mechanism.memory_term(s)
                      for s, used in points if self.b is not None and mechanism.memory_term(s) != 0
                      and only((s, used), fitted | {mechanism.name})]
            if ratios:
                value = sum(ratios) / len(ratios)
                self.coefficients[mechanism.name] = max(0.0, value) if mechanism.term.nonnegative else value
            elif mechanism.term.soft:
                self.coefficients[mechanism.name] = 0.0  # not measured yet: a small effect, assumed absent
        self.points = points

    def coefficient(self, name: str) -> float | None:
        return self.coefficients.get(name)

    def _predict(self, strategy: Strategy, exclude: str = "") -> float:
        total = self.a + (self.b or 0.0) * strategy.micro_batch
        for mechanism in self.terms:
            value = self.coefficients[mechanism.name]
            if mechanism.name != exclude and value is not None:
                total += value * mechanism.memory_term(strategy)
        return total

    def known_saving(self, strategy: Strategy) -> float:
        return sum(mechanism.known_saving(strategy, self.counts) for mechanism in self.mechanisms)

    def predict(self, strategy: Strategy) -> float | None:
        """Predicted used bytes, or None when neither the global fit nor a local line can say."""
        unsaved = self._local(strategy)
        if unsaved is None and self.b is not None and all(
                mechanism.memory_term(strategy) == 0 or self.coefficients[mechanism.name] is not None
                for mechanism in self.terms):
            unsaved = self._predict(strategy)
        return None if unsaved is None else unsaved - self.known_saving(strategy)

    def least(self, strategy: Strategy, largest: dict[str, float]) -> float | None:
        """The fewest bytes the strategy can take: the line with each bounded mechanism's coefficient at its largest
        (`largest`: name -> Mechanism.largest_coefficient) where that saves more than the fitted one; None where a
        coefficient is neither fitted nor bounded."""
        if self.b is None:
            return None
        total = self.a + self.b * strategy.micro_batch
        for mechanism in self.terms:
            term = mechanism.memory_term(strategy)
            values = [v for v in (self.coefficients[mechanism.name], largest.get(mechanism.name)) if v is not None]
            if term and not values:
                return None
            total += min((value * term for value in values), default=0.0)
        return total - self.known_saving(strategy)

    def _local(self, strategy: Strategy) -> float | None:
        """At a fixed micro-batch, memory is a line in each other mechanism's term (e.g. recomputed blocks at
        m = 8): two measured points on that line predict it better than the global fit."""
        for mechanism in self.terms:
            varying = {f.name for f in mechanism.fields} | _grouped(self.mechanisms)
            if "micro_batch" in varying:
                continue

            line = [(mechanism.memory_term(s), used) for s, used in self.points
                    if _others(s, varying) == _others(strategy, varying)]
            fitted = least_squares(line)
            if fitted is not None:
                return fitted[0] + fitted[1] * mechanism.memory_term(strategy)
        return None
