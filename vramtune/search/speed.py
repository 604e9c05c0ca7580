"""The speed model: a micro-step costs a fixed overhead plus a time per sample, so samples/s = m / (o + m*t),
i.e. 1/speed is a line in 1/m. Fitted per speed group (each precision its own) to probes with every axis off; each
axis (recompute) then costs a measured fraction of throughput per unit of it (per recomputed block). It only
decides what is not worth probing; choices are always measured."""
from __future__ import annotations

from collections.abc import Sequence

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.mechanisms.base import Mechanism
from vramtune.memory.fitting import least_squares


def speed_group(mechanisms: Sequence[Mechanism], strategy: Strategy) -> str:
    return "/".join(m.speed_group(strategy) for m in mechanisms)


def _plain(fit: tuple[float, float] | None, micro_batch: int) -> float | None:
    if fit is None:
        return None
    inverse = fit[0] + fit[1] / micro_batch
    return 1 / inverse if inverse > 0 else None


class SpeedModel:
    def __init__(self, mechanisms: Sequence[Mechanism], results: dict[Strategy, ProbeResult], strategy: Strategy,
                 axes: Sequence[Mechanism], modelled_base: bool = False):
        """For the strategy's speed group (every mechanism's, `mechanisms`). modelled_base: an axis probe whose twin
        with the axis off was not measured is compared with its group's modelled speed (only where speed rises
        smoothly with the micro-batch, i.e. on GPUs). The cost of an axis, as a fraction of throughput, is shared by
        all groups."""
        self.axes = axes

        def plain(s: Strategy) -> bool:
            return all(axis.weight(s) == 0 for axis in axes)

        def fit(group: str) -> tuple[float, float] | None:
            """(t, o) with 1/speed = t + o * (1/m), from the group's probes with every axis off."""
            return least_squares([(1 / s.micro_batch, 1 / r.samples_per_sec) for s, r in results.items()
                                  if speed_group(mechanisms, s) == group and plain(s) and r.samples_per_sec])

        self.fit = fit(speed_group(mechanisms, strategy))
        fits = {group: fit(group) for group in {speed_group(mechanisms, s) for s in results}} if modelled_base else {}
        self.costs: dict[str, float | None] = {}
        for axis in axes:
            costs = []
            for s, result in results.items():
                amount = axis.weight(s)
                if not (amount and result.samples_per_sec):
                    continue
                twin = results.get(s.with_(**{f.name: f.default for f in axis.fields}))
                base = twin.samples_per_sec if twin is not None else None
                if not base and modelled_base:
                    base = _plain(fits[speed_group(mechanisms, s)], s.micro_batch)
                if base:
                    costs.append((1 - result.samples_per_sec / base) / amount)
            self.costs[axis.name] = sum(costs) / len(costs) if costs else None  # throughput lost per unit

    def cost(self, axis: Mechanism) -> float | None:
        return self.costs.get(axis.name)

    def plain(self, micro_batch: int) -> float | None:
        return _plain(self.fit, micro_batch)

    def bound(self, strategy: Strategy, least: float, measured_plain: float | None = None) -> float | None:
        """The most samples/s the strategy can reach: its measured (or modelled) speed with the axes off, slowed
        only by `least`, the fraction of the per-sample compute its axes cost at least."""
        plain = measured_plain or self.plain(strategy.micro_batch)
        if plain is None:
            return None
        per_sample, overhead = self.fit if self.fit is not None else (0.0, 0.0)
        step = per_sample + overhead / strategy.micro_batch
        return plain / (1 + least * per_sample / step) if per_sample > 0 and step > 0 else plain

    def predict(self, strategy: Strategy, measured_plain: float | None = None) -> float | None:
        """samples/s of a strategy: its measured (or modelled) speed with the axes off, less their costs. A cost per
        unit extrapolated past what the axis can cost in full (Mechanism.most_cost) is held there; where the costs
        would still take all the throughput, the line says nothing there: None."""
        plain = measured_plain or self.plain(strategy.micro_batch)
        used = [(axis, axis.weight(strategy)) for axis in self.axes if axis.weight(strategy)]
        if plain is None or any(self.costs.get(axis.name) is None for axis, _ in used):
            return None
        lost = sum(min(self.costs[axis.name] * amount, 1.0 if axis.most_cost is None else axis.most_cost)
                   for axis, amount in used)
        return plain * (1 - lost) if lost < 1 else None
