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

from dataclasses import asdict, dataclass, field
from typing import Any

from vramtune.mechanisms.precision import level_of
from vramtune.mechanisms.sharding import PARTITIONED
from vramtune.search.fitting import least_squares, linear_fit

OPTIMIZER_BYTES = {"adamw": 8, "adam": 8, "momentum": 4, "sgd": 0}  # fp32 state per trainable parameter
PREFERENCE = {"O2": 0, "O1": 1, "O0": 2}  # predicted best: AMP O2, then O1, then fp32 (speed is not estimated)


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


@dataclass
class Factors:
    """What the CPU cannot show: stated, or calibrated from GPU probes (`source` says which)."""

    o1_activations: float = 0.55  # AMP O1 activation bytes over fp32's (white-listed ops' outputs in half)
    o2_activations: float = 0.5  # AMP O2: nearly every activation in half
    fragmentation: float = 0.08  # a GPU allocator's reserve beyond the allocated peak
    source: str = "stated"

    def activations(self, precision: str) -> float:
        return {"O0": 1.0, "O1": self.o1_activations, "O2": self.o2_activations}[level_of(precision)]


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
    precision: str
    micro_batch: int
    accumulation: int
    recomputed_blocks: int
    sharding_stage: int
    devices: int
    weights: int
    gradients: int
    optimizer_state: int
    amp_copies: int
    activations: int
    allocator: int
    buffers: int = 0  # paddle.DataParallel's fused gradient buffers (several ranks, no sharding)
    fits: bool = False

    @property
    def peak(self) -> int:
        """The allocated peak predicted."""
        return (self.weights + self.gradients + self.optimizer_state + self.amp_copies + self.activations
                + self.buffers)

    @property
    def reserved(self) -> int:
        return self.peak + self.allocator

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "peak_bytes": self.peak, "reserved_bytes": self.reserved}

    def preference(self) -> tuple:
        """The predicted best first: AMP O2, O1, fp32; the fewest layers recomputed; the largest micro-batch; the
        lowest stage."""
        return (PREFERENCE[level_of(self.precision)], self.recomputed_blocks, -self.micro_batch, self.sharding_stage,
                self.precision)


def recompute_levels(layers: int) -> list[int]:
    """None, a quarter, half, three quarters and every layer recomputed."""
    return sorted({0, layers // 4, layers // 2, 3 * layers // 4, layers})


def state(counts: Counts, precision: str, optimizer: str, master_grad: bool = False) -> dict[str, int]:
    """Unpartitioned bytes of weights, gradients and optimizer state, and O1's half weight copies."""
    level, fp16 = level_of(precision), precision.startswith("fp16")
    if level == "O2":
        kept = counts.batchnorm + (counts.layernorm if fp16 else 0)  # decorate keeps these fp32
        weights = 2 * (counts.params - kept) + 4 * kept
        gradients = (4 if master_grad else 2) * counts.trainable
        optimizer_bytes = (OPTIMIZER_BYTES[optimizer] + 4) * counts.trainable  # + fp32 master weights
    else:
        weights, gradients = 4 * counts.params, 4 * counts.trainable
        optimizer_bytes = OPTIMIZER_BYTES[optimizer] * counts.trainable
    return {"weights": weights, "gradients": gradients, "optimizer_state": optimizer_bytes,
            "amp_copies": amp_copies(counts, precision)}


def amp_copies(counts: Counts, precision: str) -> int:
    """AMP O1 keeps a half copy of each matmul and conv weight for backward."""
    return 2 * counts.matmul if level_of(precision) == "O1" else 0


ROW_PART = {"optimizer": "optimizer_state", "gradient": "gradients", "weight": "weights"}  # sharding's names -> Row's


def row(counts: Counts, fit: ActivationFit, factors: Factors, *, precision: str, micro_batch: int,
        accumulation: int, recomputed: int, stage: int, devices: int, optimizer: str, gpu: bool,
        master_grad: bool = False, buffer_ratio: float = 0.0) -> Row:
    """buffer_ratio: data parallel's buffers over the gradients they fuse, as measured at 2 ranks."""
    parts = state(counts, precision, optimizer, master_grad)
    buffers = int(buffer_ratio * parts["gradients"]) if devices > 1 and not stage else 0
    for part in PARTITIONED.get(stage, ()) if devices > 1 else ():
        parts[ROW_PART[part]] //= devices
    activations = fit.activations(counts.layers, micro_batch, recomputed) * factors.activations(precision)
    allocated = sum(parts.values()) + buffers + activations
    allocator = allocated * factors.fragmentation if gpu else 0.0
    return Row(precision, micro_batch, accumulation, recomputed, stage, devices, allocator=int(allocator),
               activations=int(max(0.0, activations)), buffers=buffers, **parts)
