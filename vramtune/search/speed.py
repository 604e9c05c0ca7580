"""The speed model: a micro-step costs a fixed overhead plus a time per sample, so samples/s = m / (o + m*t),
i.e. 1/speed is a line in 1/m. Fitted per precision to probes without recompute; recompute then costs a measured
fraction of throughput per block. It only decides what is not worth probing; choices are always measured."""
from __future__ import annotations

from vramtune.records import ProbeResult
from vramtune.search.fitting import least_squares
from vramtune.strategy import Strategy


def _fit(results: dict[Strategy, ProbeResult], precision: str) -> tuple[float, float] | None:
    """(t, o) with 1/speed = t + o * (1/m), from the probes of one precision without recompute."""
    return least_squares([(1 / s.micro_batch, 1 / r.samples_per_sec) for s, r in results.items()
                  if s.precision == precision and not s.recomputed_blocks and r.samples_per_sec])


def _plain(fit: tuple[float, float] | None, micro_batch: int) -> float | None:
    if fit is None:
        return None
    inverse = fit[0] + fit[1] / micro_batch
    return 1 / inverse if inverse > 0 else None


class SpeedModel:
    def __init__(self, results: dict[Strategy, ProbeResult], precision: str, modelled_base: bool = False):
        """modelled_base: a recompute probe whose plain twin was not measured is compared with its precision's
        modelled plain speed (only where speed rises smoothly with the micro-batch, i.e. on GPUs). The cost of a
        recomputed block, as a fraction of throughput, is shared by all precisions."""
        self.fit = _fit(results, precision)
        fits = {s.precision: _fit(results, s.precision) for s in results} if modelled_base else {}
        costs = []
        for strategy, result in results.items():
            if not (strategy.recomputed_blocks and result.samples_per_sec):
                continue
            twin = results.get(strategy.with_(recomputed_blocks=0))
            base = twin.samples_per_sec if twin is not None else None
            if not base and modelled_base:
                base = _plain(fits[strategy.precision], strategy.micro_batch)
            if base:
                costs.append((1 - result.samples_per_sec / base) / strategy.recomputed_blocks)
        self.recompute_cost = sum(costs) / len(costs) if costs else None  # throughput lost per block

    def plain(self, micro_batch: int) -> float | None:
        return _plain(self.fit, micro_batch)

    def predict(self, strategy: Strategy, measured_plain: float | None = None) -> float | None:
        """samples/s of a strategy: its measured (or modelled) speed without recompute, less the recompute cost."""
        plain = measured_plain or self.plain(strategy.micro_batch)
        if plain is None or (strategy.recomputed_blocks and self.recompute_cost is None):
            return None
        return plain * max(0.0, 1 - (self.recompute_cost or 0.0) * strategy.recomputed_blocks)
