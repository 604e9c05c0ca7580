"""The estimate's arithmetic (Paddle-free): the counted state of every precision, sharding stage and rank, the
activations fitted to CPU probes of a depth-reduced copy and extrapolated, and the factors the CPU cannot show.

Per rank and strategy: weights + gradients + optimizer state (counted: bytes per parameter of each precision, the
trainable ones only for gradients and optimizer state, 1/N of what the sharding stage partitions) + activations
(measured on CPU in fp32: a0 + m (b0 + b1 d) over depth d and micro-batch m; recompute saves m (s0 + s1 d); scaled
by a factor for AMP) + AMP O1's half copies of the matmul weights + with several data-parallel ranks and no sharding,
paddle.DataParallel's fused gradient buffers (their ratio to the gradients measured at 2 ranks); on a GPU, the
allocator's reserve beyond that.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vramtune.core.strategy import Strategy
from vramtune.memory import held
from vramtune.memory.fitting import least_squares, linear_fit

OPTIMIZER_BYTES = {"adamw": 8, "adam": 8, "momentum": 4, "sgd": 0}  # fp32 state per trainable parameter


@dataclass
class Counts:
    """What the child counted for the full model (child/counting.py)."""

    params: int
    trainable: int
    batchnorm: int = 0  # kept fp32 under AMP O2
    layernorm: int = 0  # kept fp32 under fp16 O2
    matmul: int = 0  # matmul and conv weights: AMP O1 keeps a half copy of each
    layers: int = 0
    shape: dict[str, Any] = field(default_factory=dict)  # the configuration's depth and width (PaddleNLP models)
    ema_elements: int = 0  # a kit's EMA: its fp32 shadows' elements (held.py)
    state_copies: int = 0  # copies of the weights a kit's loop keeps aside (PaddleOCR's EMA swaps: held.py)


@dataclass
class Factors:
    """What the CPU cannot show: stated, or calibrated from GPU probes (`source` says which)."""

    o1_activations: float = 0.55  # AMP O1 activation bytes over fp32's (white-listed ops' outputs in half)
    o2_activations: float = 0.5  # AMP O2: nearly every activation in half
    fragmentation: float = 0.08  # a GPU allocator's reserve beyond the allocated peak
    source: str = "stated"

    def activations(self, mechanisms: Sequence[Counting], strategy: Strategy) -> float:
        """The strategy's activation bytes over fp32's (each mechanism's factor)."""
        factor = 1.0
        for mechanism in mechanisms:
            factor *= mechanism.activation_factor(strategy, self)
        return factor


@dataclass(frozen=True)
class Given:
    """What the estimate is told beside the strategy: the optimizer, whether AMP O2 keeps fp32 gradients
    (amp_master_grad), and data parallel's fused gradient buffers over the gradients (measured at 2 ranks)."""

    optimizer: str = "adamw"
    master_grad: bool = False
    buffer_ratio: float = 0.0


class Counting(Protocol):
    """What the estimate's arithmetic asks of a mechanism (mechanisms/base.py declares each; memory/ is below the
    mechanisms, so they are given)."""

    def counted_state(self, state: dict[str, int], strategy: Strategy, counts: Counts, given: Given
                      ) -> dict[str, int]: ...

    def activation_factor(self, strategy: Strategy, factors: Factors) -> float: ...

    def rerun_layers(self, strategy: Strategy) -> int: ...


@dataclass
class ActivationFit:
    """fp32 activations on the CPU: max(floor, a0 + m (b0 + b1 d)) over depth d and micro-batch m, where the floor is a
    transient the size of no activation (the embedding's gradient, an optimizer temporary) that sets small steps'
    peaks; recomputing every layer saves m (s0 + s1 d), the first r of them m min(s1 r, s0 + s1 d). width_scale < 1
    when the probes were narrower than the model (the per-layer terms scale back)."""

    a0: float
    b0: float
    b1: float
    floor: float = 0.0
    s0: float = 0.0
    s1: float = 0.0
    width_scale: float = 1.0
    points: list[dict[str, Any]] = field(default_factory=list)  # the probes it was fitted to

    def activations(self, layers: int, micro_batch: int, recomputed: int) -> float:
        per_layer, saving = self.b1 / self.width_scale, self.s1 / self.width_scale
        full = self.a0 + micro_batch * (self.b0 + per_layer * layers)
        if recomputed and layers:
            every = self.s0 + saving * layers
            if recomputed >= layers:
                part = every
            elif saving:  # the first r layers: rebuilt once the later layers' activations are gone (s0 not beside)
                part = min(saving * recomputed, every)
            else:  # one depth probed (the whole model): the per-layer saving is not known apart, its share linear
                part = every * recomputed / layers
            full -= micro_batch * part
        return max(self.floor, full)

    @classmethod
    def fit(cls, plain: list[tuple[int, int, float]], recomputed: list[tuple[int, int, float]],
            width_scale: float, floor: float = 0.0) -> ActivationFit:
        """plain: (depth, micro-batch, activations) where activations set the peak, at two micro-batches of one depth
        and one of another (or two micro-batches of the full depth); recomputed: (depth, micro-batch, activations
        with every layer recomputed) at each depth; floor: what the smaller probes peaked at instead."""
        depths = {d for d, _, _ in plain}
        if len(depths) > 1:
            coefficients = linear_fit([(1.0, m, m * d) for d, m, _ in plain], [a for _, _, a in plain])
            assert coefficients is not None, plain
            a0, b0, b1 = coefficients
        else:
            line = least_squares([(m, a) for _, m, a in plain])
            assert line is not None, plain
            (a0, b0), b1 = line, 0.0
        s0 = s1 = 0.0
        if recomputed:
            savings = [(d, (a0 + m * (b0 + b1 * d) - act) / m) for d, m, act in recomputed]
            s0, s1 = least_squares(savings) or (savings[0][1], 0.0)
        return cls(a0, b0, b1, floor, s0, s1, width_scale,
                   [{"depth": d, "micro_batch": m, "activations": a} for d, m, a in plain]
                   + [{"depth": d, "micro_batch": m, "activations": a, "recomputed": True} for d, m, a in recomputed])


@dataclass
class Row:
    """One strategy's predicted per-rank peak: the counted state by part (weights, gradients, optimizer_state and the
    mechanisms' own, e.g. AMP O1's weight copies), the activations and, on a GPU, the allocator's reserve."""

    strategy: Strategy
    state: dict[str, int]
    activations: int
    allocator: int
    fits: bool = False

    def __getattr__(self, name: str) -> Any:
        """The strategy's fields (row.micro_batch) and the state's parts (row.weights), read as the row's."""
        if name in ("strategy", "state"):
            raise AttributeError(name)
        if name in self.state:
            return self.state[name]
        return getattr(self.strategy, name)

    @property
    def peak(self) -> int:
        """The allocated peak predicted."""
        return sum(self.state.values()) + self.activations

    @property
    def reserved(self) -> int:
        return self.peak + self.allocator

    def to_json(self) -> dict[str, Any]:
        return {**self.strategy.to_json(), **self.state, "activations": self.activations, "allocator": self.allocator,
                "fits": self.fits, "peak_bytes": self.peak, "reserved_bytes": self.reserved}


def state(mechanisms: Sequence[Counting], counts: Counts, strategy: Strategy, given: Given) -> dict[str, int]:
    """One rank's counted state by part: fp32's (4 B per parameter, gradients and the optimizer's fp32 state of the
    trainable ones) as every mechanism changes it, in registry order."""
    parts = {"weights": 4 * counts.params, "gradients": 4 * counts.trainable,
             "optimizer_state": OPTIMIZER_BYTES[given.optimizer] * counts.trainable}
    for mechanism in mechanisms:
        parts = mechanism.counted_state(parts, strategy, counts, given)
    return parts


def own_parts(mechanisms: Sequence[Counting], counts: Counts, strategy: Strategy) -> int:
    """What the mechanisms add to the state beyond the weights, gradients and optimizer state (AMP O1's half weight
    copies, data parallel's buffers), which a probe's measured state does not count."""
    parts = state(mechanisms, counts, strategy, Given())
    return sum(bytes_ for part, bytes_ in parts.items() if part not in ("weights", "gradients", "optimizer_state"))


def row(mechanisms: Sequence[Counting], counts: Counts, fit: ActivationFit, factors: Factors, strategy: Strategy,
        given: Given, gpu: bool) -> Row:
    """The counted state, the activations fitted (without what a kit's loop holds beside the state, which the fp32
    probes measured with them) scaled by the strategy's factor, that held state counted at its precision."""
    parts = state(mechanisms, counts, strategy, given)
    rerun = sum(mechanism.rerun_layers(strategy) for mechanism in mechanisms)
    activations = fit.activations(counts.layers, strategy.micro_batch, rerun) - held.probed(counts)
    activations *= factors.activations(mechanisms, strategy)
    if held.probed(counts):
        parts["ema"] = held.held(counts, parts["weights"])
    allocated = sum(parts.values()) + activations
    allocator = allocated * factors.fragmentation if gpu else 0.0
    return Row(strategy, parts, activations=int(max(0.0, activations)), allocator=int(allocator))
