"""Fake devices for the search and the CLI: deterministic memory and speed landscapes (no Paddle).

A FakeDevice answers like a probe child would: allocated (and on a GPU reserved) peak bytes and samples/s for
a strategy. Memory: fixed + m * (per_sample - saved * r) [x amp_factor under AMP] - k1_saving when k = 1.
Speed: every micro-step pays `overhead` seconds plus `per_sample_time` per sample, slowed by recompute
(1 + recompute_cost * r / L), sped up under AMP (amp_speed). GPU shapes (gpu_shapes()) take their numbers from
published physics: weights + grads + AdamW state = 16 B/param, AMP keeps ~55% of fp32 activation bytes and runs
~2x faster, fp16 and bf16 take the same bytes, a recomputed block keeps only its input and costs ~1/3 of its
compute again, reserved = allocated + fragmentation rounded up to 2 MiB blocks, above the card -> oom with no
figures, a budget below the card -> oom at the budget (FLAGS_gpu_memory_limit_mb), +-1.5% speed noise.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import resource
import signal
from dataclasses import dataclass, field

from vramtune.mechanisms.sharding import MECHANISM as SHARDING
from vramtune.records import Budget, Device, ProbeJob, ProbeResult
from vramtune.strategy import Strategy

MiB, GiB = 2**20, 2**30
BLOCK = 2 * MiB  # the GPU allocator's reservation granularity


def plan(precision: str, micro: int, accumulation: int, recomputed: int = 0) -> Strategy:
    return Strategy(precision=precision, micro_batch=micro, accumulation=accumulation, recomputed_blocks=recomputed)


@dataclass
class FakeDevice:
    fixed: float = 20 * MiB  # weights, gradients and optimizer state
    per_sample: float = 2 * MiB  # activation bytes per sample (fp32)
    saved: float = 0.3 * MiB  # bytes per sample each recomputed block saves (fp32)
    blocks: int = 4
    k1_saving: float = 0.0  # bytes below the accumulating line when k = 1 (gradients freed before forward)
    overhead: float = 0.01  # seconds per micro-step, whatever its size (launch / latency bound)
    per_sample_time: float = 0.01
    recompute_cost: float = 0.25  # step-time fraction added by recomputing every block
    amp_factor: float = 1.0  # AMP activation bytes / fp32
    amp_speed: float = 1.0
    small_batch_bonus: float = 0.0  # CPUs: caches favour small batches
    kind: str = "cpu"
    name: str = "fake cpu"
    card_bytes: int = 64 * GiB
    fragmentation: float = 0.0  # reserved = allocated * (1 + this), rounded up to BLOCK (GPU)
    dp_buffer: float = 0.0  # data parallel's fused gradient buffers (several ranks, no sharding)
    noise: float = 0.0
    amp_unsupported: dict[str, str] = field(default_factory=dict)
    calls: list[Strategy] = field(default_factory=list)

    def device(self) -> Device:
        return Device(self.kind, 0, self.name, self.card_bytes, "0.0-fake", dict(self.amp_unsupported), count=8)

    def peak(self, s: Strategy) -> float:
        scale = self.amp_factor if s.precision != "fp32" else 1.0
        activations = s.micro_batch * scale * (self.per_sample - self.saved * s.recomputed_blocks)
        sharded = SHARDING.known_saving(s, self.counts())  # each rank keeps 1/N of what its stage partitions
        buffers = self.dp_buffer if s.devices > 1 and not s.sharding_stage else 0.0
        return self.fixed + activations - (self.k1_saving if s.accumulation == 1 else 0.0) - sharded + buffers

    def counts(self) -> dict[str, float]:
        """fixed = weights (1/4) + gradients (1/4) + optimizer state (1/2), as for fp32 AdamW."""
        return {"weight": self.fixed / 4, "gradient": self.fixed / 4, "optimizer": self.fixed / 2}

    def reserved(self, s: Strategy) -> int | None:
        if self.kind != "gpu":
            return None
        return math.ceil(self.peak(s) * (1 + self.fragmentation) / BLOCK) * BLOCK

    def speed(self, s: Strategy) -> float:
        per_sample = self.per_sample_time * (1 + self.recompute_cost * s.recomputed_blocks / self.blocks)
        per_sample *= 1 + self.small_batch_bonus * s.micro_batch
        if s.precision != "fp32":
            per_sample /= self.amp_speed
        step = s.accumulation * (self.overhead + s.micro_batch * per_sample)
        jitter = int(hashlib.sha256(s.label().encode()).hexdigest()[:8], 16) / 0xFFFFFFFF * 2 - 1
        return s.batch / step * (1 + self.noise * jitter)

    def result(self, s: Strategy, budget: Budget) -> ProbeResult:
        """What a probe child reports, already judged against the budget as the session would."""
        self.calls.append(s)
        if self.amp_unsupported.get(s.precision):
            return ProbeResult("unsupported", s, error=self.amp_unsupported[s.precision])
        counts = self.counts()
        base = ProbeResult("measured", s, total_blocks=self.blocks, block_path="blocks", weight_bytes=int(counts["weight"]),
                           gradient_bytes=int(counts["gradient"]), optimizer_bytes=int(counts["optimizer"]),
                           device={"name": self.name, "kind": self.kind}, paddle_version="0.0-fake")
        used = self.reserved(s) or self.peak(s)
        limit = min(self.card_bytes, budget.bytes) if self.kind == "gpu" else math.inf
        if used > limit:  # the allocator fails: no figures
            return dataclasses.replace(base, status="oom", error="MemoryError: (ResourceExhausted) Out of memory")
        return dataclasses.replace(base, peak_bytes=int(self.peak(s)), reserved_bytes=self.reserved(s),
                                   step_seconds=s.batch / self.speed(s), samples_per_sec=self.speed(s),
                                   loss=1.0).judged(budget)

    def measure(self, budget: int, headroom: float = 0.05):
        """A measure(strategy) function for the Tuner."""
        return lambda s: self.result(s, Budget(budget, headroom))


class FakeBackend:
    """The session's backend over a FakeDevice: the CLI runs whole commands without Paddle."""

    def __init__(self, device: FakeDevice, missing: set[str] | None = None):
        self.fake, self.missing, self.jobs = device, missing or set(), []

    def describe(self, device: str) -> Device:
        from vramtune.runner import DeviceError

        if device in self.missing:
            raise DeviceError(f"device {device!r}: not on this fake machine")
        if device == "cpu" and self.fake.kind != "cpu":
            return FakeDevice().device()
        return self.fake.device()

    def measure(self, job: ProbeJob, timeout: float, budget: Budget) -> ProbeResult:
        self.jobs.append(job)
        result = self.fake.result(Strategy.from_json(job.strategy), budget)
        return dataclasses.replace(result, status="measured" if result.measured else result.status)


@contextlib.contextmanager
def file_size_limit(size: int):
    """Writes past `size` bytes fail with EFBIG (as on a full disk), for root too; SIGXFSZ is ignored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@dataclass
class Shape:
    """A GPU-shaped tuning problem: a fake card with a model's memory and speed, and the spec's search."""

    name: str
    device: FakeDevice
    target_batch: int
    budget_bytes: int
    precisions: list[str] = field(default_factory=lambda: ["fp16", "bf16"])
    max_accumulation: int = 64


def _transformer(params: float, layers: int, seq: int, hidden: int, heads: int, vocab: int = 0) -> dict:
    """Bytes from published formulas: 16 B/param for fp32 weights + grads + AdamW state; per layer and sample,
    s*h*(34 + 5*a*s/h) bytes of fp16 activations (Korthikanti et al.), doubled for fp32; logits twice."""
    per_layer = 2 * seq * hidden * (34 + 5 * heads * seq / hidden)
    logits = 2 * 4 * seq * vocab
    keep = 4 * seq * hidden  # a recomputed block keeps only its input
    return {"fixed": 16 * params, "per_sample": layers * per_layer + logits, "saved": per_layer - keep,
            "blocks": layers, "k1_saving": 0.75 * 4 * params}


def gpu(name: str, card_gib: float, bf16: bool = True, **physics) -> FakeDevice:
    defaults = {"kind": "gpu", "name": name, "card_bytes": int(card_gib * GiB), "fragmentation": 0.08,
                "noise": 0.015, "amp_factor": 0.55, "amp_speed": 2.0, "recompute_cost": 0.3, "overhead": 0.008}
    unsupported = {} if bf16 else {"bf16": f"{name} has no bf16 support (needs compute capability 8.0+)"}
    return FakeDevice(**{**defaults, **physics}, amp_unsupported=unsupported)


def gpu_shapes() -> list[Shape]:
    return [
        Shape("BERT-base seq 512, A100 40GB", gpu("A100-SXM4-40GB", 40, per_sample_time=1 / 90,
                                                  **_transformer(110e6, 12, 512, 768, 12)), 128, 40 * GiB),
        Shape("GPT-2 medium seq 1024, 24GB", gpu("RTX 4090 24GB", 24, per_sample_time=1 / 12,
                                                 **_transformer(355e6, 24, 1024, 1024, 16, 50257)), 16, 24 * GiB),
        Shape("ViT-B/16, V100 16GB (no bf16)", gpu("V100-SXM2-16GB", 16, bf16=False, per_sample_time=1 / 250,
                                                   amp_speed=3.0, **_transformer(86e6, 12, 197, 768, 12)),
              1024, 16 * GiB),
        Shape("latency-bound small model, 8GB", gpu("T4 8GB slice", 8, bf16=False, per_sample_time=0.0004,
                                                    overhead=0.06, recompute_cost=0.2,
                                                    **_transformer(30e6, 6, 256, 512, 8)), 512, 8 * GiB),
        Shape("0.5B decoder, 24GB budget on A100 80GB", gpu("A100-SXM4-80GB", 80, per_sample_time=1 / 20,
                                                            **_transformer(494e6, 24, 1024, 896, 14, 151936)),
              32, 24 * GiB),
        Shape("BERT-large seq 512 fp32 only, max_accumulation 4", gpu("A10 24GB", 24, per_sample_time=1 / 25,
                                                                      **_transformer(340e6, 24, 512, 1024, 16)),
              64, 24 * GiB, precisions=[], max_accumulation=4),
    ]
