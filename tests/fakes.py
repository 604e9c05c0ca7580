"""Fake devices for the search and the CLI: deterministic memory and speed landscapes (no Paddle).

A FakeDevice answers like a probe child would: allocated (and on a GPU reserved) peak bytes and samples/s for
a strategy. Memory: fixed [+ amp_cast_bytes under O1] + m * (per_sample - saved * r) [x amp_factor under O1,
x o2_factor under O2] - k1_saving when k = 1.
Speed: every micro-step pays `overhead` seconds plus `per_sample_time` per sample, slowed by recompute
(1 + recompute_cost * r / L), sped up under AMP (amp_speed; O2 o2_speed more). GPU shapes (gpu_shapes()) take
their numbers from published physics: weights + grads + AdamW state = 16 B/param (O2: 2 + 2 + 4 master + 8 moments,
the same 16), AMP O1 keeps ~55% of fp32 activation bytes plus half copies of the weights for backward (2 B/param)
and runs ~2x faster, O2 keeps ~50% with no weight copies and runs ~10% faster than O1 (no cast kernels), fp16 and
bf16 take the same bytes, a recomputed block keeps only its input and costs ~1/3 of its compute again, reserved =
allocated + fragmentation rounded up to 2 MiB blocks, above the card -> oom with no figures, a budget below the
card -> oom at the budget (FLAGS_gpu_memory_limit_mb), +-1.5% speed noise.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import resource
import signal
from dataclasses import dataclass, field

from vramtune.core.records import Budget, Device, ProbeJob, ProbeResult
from vramtune.core.strategy import AMP_PRECISIONS, Strategy, dtype_of, level_of
from vramtune.core.verification import ToolRun, Verified
from vramtune.mechanisms.accumulation import AccumulationSearch
from vramtune.mechanisms.precision import PrecisionSettings
from vramtune.mechanisms.recompute import RecomputeSettings
from vramtune.mechanisms.sharding import MECHANISM as SHARDING
from vramtune.search import SearchProblem
from vramtune.spec import default_settings

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
    batchnorm_layers: int = 0  # reported as the model's (the BatchNorm floor), where not 0
    k1_saving: float = 0.0  # bytes below the accumulating line when k = 1 (gradients freed before forward)
    overhead: float = 0.01  # seconds per micro-step, whatever its size (launch / latency bound)
    per_sample_time: float = 0.01
    recompute_cost: float = 0.25  # step-time fraction added by recomputing every block
    amp_factor: float = 1.0  # AMP activation bytes / fp32
    amp_speed: float = 1.0
    amp_cast_bytes: float = 0.0  # O1: half copies of the weights kept for backward
    o2_factor: float | None = None  # O2 activation bytes / fp32 (None: as O1)
    o2_speed: float = 1.0  # O2's speed over O1's
    small_batch_bonus: float = 0.0  # CPUs: caches favour small batches
    kind: str = "cpu"
    name: str = "fake cpu"
    card_bytes: int = 64 * GiB
    fragmentation: float = 0.0  # reserved = allocated * (1 + this), rounded up to BLOCK (GPU)
    dp_buffer: float = 0.0  # data parallel's fused gradient buffers (several ranks, no sharding)
    noise: float = 0.0
    overflows: tuple[str, ...] = ()  # number formats whose loss goes non-finite at every size (fp16-safe trains)
    safe_speed: float = 0.9  # fp16-safe's speed over fp16's (its overflow-prone ops in fp32)
    amp_unsupported: dict[str, str] = field(default_factory=dict)
    free_bytes: int | None = None  # what the card had free when described (None: not said)
    holders: list[int] = field(default_factory=list)  # the processes computing on it then
    countable: bool = True  # the lazy count can build the model (a python factory that cannot be built lazily: no)
    config: dict | None = None  # a config.json of the model's sizes, for the activation prior (None: no prior)
    seq: int = 0  # the sequence length the prior is computed at
    prior_scale: float = 1.0  # the prior handed to the search, this many times what config.json predicts (wrong)
    tool_drift: float = 0.0  # what the user's own tool holds beyond the probe's peak, as a fraction of it
    eval_per_sample: float = 0.0  # evaluation's bytes per sample above the training state (0: evaluation not modelled)
    eval_drift: float = 0.0  # what the user's own tool's evaluation holds beyond the probe's, as a fraction of it
    probe_seconds: float = 0.0  # wall seconds a probe takes: over the timeout, it times out (as runner.classify says)
    calls: list[Strategy] = field(default_factory=list)

    def device(self) -> Device:
        return Device(self.kind, 0, self.name, self.card_bytes, "0.0-fake", dict(self.amp_unsupported), count=8,
                      free_bytes=self.free_bytes, holders=list(self.holders))

    def peak(self, s: Strategy) -> float:
        level = level_of(s.precision)
        scale = {"O0": 1.0, "O1": self.amp_factor, "O2": self.o2_factor or self.amp_factor}[level]
        activations = s.micro_batch * scale * (self.per_sample - self.saved * s.recomputed_blocks)
        sharded = SHARDING.known_saving(s, self.counts(s))  # each rank keeps 1/N of what its stage partitions
        buffers = self.dp_buffer if s.devices > 1 and not s.sharding_stage else 0.0
        copies = self.amp_cast_bytes if level == "O1" else 0.0
        k1_saving = self.k1_saving * (0.5 if level == "O2" else 1.0) if s.accumulation == 1 else 0.0  # half grads
        return self.fixed + copies + activations - k1_saving - sharded + buffers

    def counts(self, s: Strategy) -> dict[str, float]:
        """fixed = weights (1/4) + gradients (1/4) + optimizer state (1/2), as for fp32 AdamW; under O2 half
        weights (1/8) and gradients (1/8), the optimizer holding fp32 master weights too (3/4)."""
        if level_of(s.precision) == "O2":
            return {"weight": self.fixed / 8, "gradient": self.fixed / 8, "optimizer": self.fixed * 3 / 4}
        return {"weight": self.fixed / 4, "gradient": self.fixed / 4, "optimizer": self.fixed / 2}

    def model_counts(self) -> dict | None:
        """What the lazy count (child/counting.py) says of the fake model: its fixed bytes are fp32 AdamW's 16 per
        parameter, every one trained; O1's half copies are of matmul weights (2 bytes each). None: not countable."""
        if not self.countable:
            return None
        params = int(self.fixed // 16)
        return {"params": params, "trainable": params, "matmul": int(self.amp_cast_bytes // 2),
                "layers": self.blocks, "shape": {}}

    def activation_prior(self) -> float | None:
        """What the search is told before any probe: the analytic model's activations per sample from config.json
        (eager attention, as the truth's [s, s] terms), computed from the sizes, not from `per_sample`."""
        from vramtune.memory.prior import per_sample

        predicted = per_sample(self.config, self.seq, flash=False) if self.config else None
        return predicted * self.prior_scale if predicted is not None else None

    def rank_counts(self, s: Strategy) -> dict[str, float]:
        """What one rank counts, as a real probe reports it: 1/N of what its sharding stage partitions."""
        from vramtune.mechanisms.sharding import PARTITIONED

        counts = self.counts(s)
        partitioned = PARTITIONED.get(s.sharding_stage, ()) if s.devices > 1 else ()
        return {part: size / s.devices if part in partitioned else size for part, size in counts.items()}

    def reserved(self, s: Strategy) -> int | None:
        if self.kind != "gpu":
            return None
        return math.ceil(self.peak(s) * (1 + self.fragmentation) / BLOCK) * BLOCK

    def speed(self, s: Strategy) -> float:
        per_sample = self.per_sample_time * (1 + self.recompute_cost * s.recomputed_blocks / max(self.blocks, 1))
        per_sample *= 1 + self.small_batch_bonus * s.micro_batch
        if s.precision != "fp32":
            per_sample /= self.amp_speed * (self.o2_speed if level_of(s.precision) == "O2" else 1.0)
        if s.precision == "fp16-safe":
            per_sample /= self.safe_speed
        step = s.accumulation * (self.overhead + s.micro_batch * per_sample)
        jitter = int(hashlib.sha256(s.label().encode()).hexdigest()[:8], 16) / 0xFFFFFFFF * 2 - 1
        return s.batch / step * (1 + self.noise * jitter)

    def result(self, s: Strategy, budget: Budget) -> ProbeResult:
        """What a probe child reports, already judged against the budget as the session would."""
        self.calls.append(s)
        if self.amp_unsupported.get(dtype_of(s.precision)):
            return ProbeResult("unsupported", s, error=self.amp_unsupported[dtype_of(s.precision)])
        counts = self.rank_counts(s)
        facts = {**({"batchnorm_layers": self.batchnorm_layers} if self.batchnorm_layers else {}),
                 "total_blocks": self.blocks, "block_path": "blocks"}
        base = ProbeResult("measured", s, facts=facts,
                           weight_bytes=int(counts["weight"]),
                           gradient_bytes=int(counts["gradient"]), optimizer_bytes=int(counts["optimizer"]),
                           device={"name": self.name, "kind": self.kind}, paddle_version="0.0-fake")
        used = self.reserved(s) or self.peak(s)
        limit = min(self.card_bytes, budget.bytes) if self.kind == "gpu" else math.inf
        if used > limit:  # the allocator fails: no figures, and no state counted (child/worker.py's "oom")
            return dataclasses.replace(base, status="oom", error="MemoryError: (ResourceExhausted) Out of memory",
                                       weight_bytes=None, gradient_bytes=None, optimizer_bytes=None)
        measured = dataclasses.replace(base, peak_bytes=int(self.peak(s)), reserved_bytes=self.reserved(s),
                                       step_seconds=s.batch / self.speed(s), samples_per_sec=self.speed(s),
                                       loss=1.0).judged(budget)
        if dtype_of(s.precision) in self.overflows and s.precision != "fp16-safe":
            return dataclasses.replace(measured, status="unstable", loss=None, error="non-finite loss: [nan, nan]")
        return measured

    def measure(self, budget: int, headroom: float = 0.05):
        """A measure(strategy) function for the Tuner."""
        return lambda s: self.result(s, Budget(budget, headroom))


class FakeBackend:
    """The session's backend over a FakeDevice: the CLI runs whole commands without Paddle."""

    def __init__(self, device: FakeDevice, missing: set[str] | None = None):
        self.fake, self.missing, self.jobs, self.tool_runs = device, missing or set(), [], []

    def describe(self, device: str) -> Device:
        from vramtune.probing.runner import DeviceError

        if device in self.missing:
            raise DeviceError(f"device {device!r}: not on this fake machine")
        if device == "cpu" and self.fake.kind != "cpu":
            return FakeDevice().device()
        return self.fake.device()

    def measure(self, job: ProbeJob, timeout: float, budget: Budget) -> ProbeResult:
        self.jobs.append(job)
        if self.fake.probe_seconds > timeout:
            return ProbeResult("timeout", Strategy.from_json(job.strategy), seconds=timeout,
                               error=f"no result after {timeout:g}s; the probe's process group was ended")
        result = self.fake.result(Strategy.from_json(job.strategy), budget)
        evaluation = job.settings.get("evaluation")
        if evaluation and self.fake.eval_per_sample and result.measured:
            result = dataclasses.replace(result, facts={**result.facts, **self.evaluated(evaluation)})
        return dataclasses.replace(result, status="measured" if result.measured else result.status)

    def evaluated(self, evaluation: dict) -> dict:
        """The evaluation facts a child reports (mechanisms/evaluation): the batch asked, halved until it fits."""
        peaks, size = {}, evaluation["batch"]
        while size >= 1:
            peaks[size] = int(self.fake.fixed + self.fake.eval_per_sample * size)
            if peaks[size] <= evaluation["limit"]:
                break
            size //= 2
        fitting = [batch for batch, peak in peaks.items() if peak <= evaluation["limit"]]
        return {"eval_requested": evaluation["batch"], "eval_batch": max(fitting, default=None),
                "eval_peaks": {str(batch): peak for batch, peak in peaks.items()},
                "eval_kept": {str(batch): 0 for batch in peaks},
                "eval_accumulation_steps": evaluation["accumulation_steps"]}

    def count(self, job: ProbeJob, timeout: float) -> dict:
        """The fake model's parameters, as the lazy count says them (FakeDevice.model_counts)."""
        from vramtune.probing.runner import DeviceError

        counts = self.fake.model_counts()
        if counts is None:
            raise DeviceError("counting the model's parameters failed: the fake model cannot be built lazily")
        return counts

    def verify(self, run: ToolRun, strategy: Strategy, device: Device, budget: Budget, timeout: float) -> Verified:
        """The user's tool on the tuned file: the fake's peak for the strategy, times its `tool_drift` (what the
        tool holds that the probe's mirror does not)."""
        self.tool_runs.append(run)
        used = int((self.fake.reserved(strategy) or self.fake.peak(strategy)) * (1 + self.fake.tool_drift))
        evaluation = int((self.fake.fixed + self.fake.eval_per_sample * run.eval_batch) * (1 + self.fake.eval_drift)) \
            if run.eval_batch and self.fake.eval_per_sample else None  # the run's one evaluation pass, at its batch
        return Verified(run.tool, "fits" if budget.fits(max(used, evaluation or 0)) else "over_budget", used,
                        seconds=1.0, steps=3, notes=list(run.notes), eval_batch=run.eval_batch,
                        eval_peak_bytes=evaluation, eval_steps=3 if evaluation else None)


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
    precisions: list[str] = field(default_factory=lambda: list(AMP_PRECISIONS))
    max_accumulation: int = 64
    to_static: bool = False  # tried for models of your own (python, vision), not for PaddleNLP's

    def problem(self) -> SearchProblem:
        return make_problem(self.budget_bytes, self.target_batch, amp_precisions=self.precisions,
                            max_accumulation=self.max_accumulation, speed_rises_with_batch=True,
                            device=self.device.device(), to_static=self.to_static, counted=self.device,
                            activations=self.device.activation_prior())


def make_problem(budget: int, target: int = 64, micro_batches: list[int] | None = None, amp_precisions=(),
                 unsupported: dict[str, str] | None = None, recompute: bool = True, max_accumulation: int = 64,
                 speed_rises_with_batch: bool = False, devices: int = 1, sharding_stages=(0,),
                 min_micro_batch: int | None = None, to_static: bool = True, device: Device | None = None,
                 headroom: float = 0.05, counted: FakeDevice | None = None,
                 activations: float | None = None) -> SearchProblem:
    """A search problem as the session makes it from a spec, from the few settings a test varies (no AMP unless
    asked; sharding stages 2 and 3 need a GPU-kind device; `counted`: the fake whose model the lazy count counts
    before the first probe, as the session counts it, search/counted.py)."""
    from vramtune.memory.counted import counted_state, given_for
    from vramtune.plugins import MECHANISMS

    settings = {**default_settings(), "precision": PrecisionSettings(list(amp_precisions)),
                "recompute": RecomputeSettings(recompute),
                "accumulation": AccumulationSearch(max_accumulation, None, min_micro_batch), "data_parallel": devices,
                "sharding": len(sharding_stages) > 1, "to_static": to_static}
    sizes = micro_batches or AccumulationSearch(max_accumulation).candidates(target // devices)
    device = device or Device("gpu" if 2 in sharding_stages else "cpu", 0, "fake", 1 << 40, "0.0-fake",
                              dict(unsupported or {}), count=8)
    state = counted_state(MECHANISMS, counted.model_counts, given_for("adamw", settings)) if counted is not None \
        else None
    return SearchProblem(target, sizes, Budget(budget, headroom), device, MECHANISMS, settings, speed_rises_with_batch,
                         state, activations)


def _transformer(params: float, layers: int, seq: int, hidden: int, heads: int, vocab: int = 0) -> dict:
    """Bytes from published formulas: 16 B/param for fp32 weights + grads + AdamW state; per layer and sample,
    s*h*(34 + 5*a*s/h) bytes of fp16 activations (Korthikanti et al.), doubled for fp32; logits twice. The config
    is what its config.json would say (a Llama-shaped decoder, an MLP 4h wide; no vocabulary: a 2-class head), for
    the search's activation prior, which the analytic model computes from it (not from these bytes)."""
    per_layer = 2 * seq * hidden * (34 + 5 * heads * seq / hidden)
    logits = 2 * 4 * seq * vocab
    keep = 4 * seq * hidden  # a recomputed block keeps only its input
    return {"fixed": 16 * params, "per_sample": layers * per_layer + logits, "saved": per_layer - keep,
            "blocks": layers, "k1_saving": 0.75 * 4 * params, "amp_cast_bytes": 2 * params, "seq": seq,
            "config": {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
                       "num_attention_heads": heads, "intermediate_size": 4 * hidden, "vocab_size": vocab or 2}}


def gpu(name: str, card_gib: float, bf16: bool = True, **physics) -> FakeDevice:
    defaults = {"kind": "gpu", "name": name, "card_bytes": int(card_gib * GiB), "fragmentation": 0.08,
                "noise": 0.015, "amp_factor": 0.55, "amp_speed": 2.0, "recompute_cost": 0.3, "overhead": 0.008,
                "o2_factor": 0.5, "o2_speed": 1.1}
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
              1024, 16 * GiB, to_static=True),
        Shape("latency-bound small model, 8GB", gpu("T4 8GB slice", 8, bf16=False, per_sample_time=0.0004,
                                                    overhead=0.06, recompute_cost=0.2,
                                                    **_transformer(30e6, 6, 256, 512, 8)), 512, 8 * GiB,
              to_static=True),
        Shape("0.5B decoder, 24GB budget on A100 80GB", gpu("A100-SXM4-80GB", 80, per_sample_time=1 / 20,
                                                            **_transformer(494e6, 24, 1024, 896, 14, 151936)),
              32, 24 * GiB),
        Shape("BERT-large seq 512 fp32 only, max_accumulation 4", gpu("A10 24GB", 24, per_sample_time=1 / 25,
                                                                      **_transformer(340e6, 24, 512, 1024, 16)),
              64, 24 * GiB, precisions=[], max_accumulation=4),
        Shape("1.3B decoder, fp16 overflows at every size, A100 40GB", gpu(
            "A100-SXM4-40GB", 40, per_sample_time=1 / 6, overflows=("fp16",),
            **_transformer(1.3e9, 24, 2048, 2048, 16, 50257)), 32, 40 * GiB),
        Shape("1.3B decoder, fp16 overflows, V100 32GB (no bf16)", gpu(
            "V100-SXM2-32GB", 32, bf16=False, per_sample_time=1 / 4, overflows=("fp16",),
            **_transformer(1.3e9, 24, 1024, 2048, 16, 50257)), 32, 32 * GiB),
        Shape("latency-bound, recompute buys a larger micro-batch, 6GB", gpu(
            "T4 6GB slice", 6, bf16=False, per_sample_time=0.0002, overhead=0.08, recompute_cost=0.15,
            **_transformer(20e6, 8, 512, 512, 8)), 1024, 6 * GiB, to_static=True),
        Shape("ViT-L/16 seq 197, fp32 3x slower, A100 40GB", gpu(
            "A100-SXM4-40GB", 40, per_sample_time=1 / 40, amp_speed=3.0, **_transformer(304e6, 24, 197, 1024, 16)),
              512, 40 * GiB, to_static=True),
        Shape("GPT-2 medium seq 2048, 24GB budget on A100 80GB: only m=1 fits", gpu(
            "A100-SXM4-80GB", 80, per_sample_time=1 / 5, **_transformer(355e6, 24, 2048, 1024, 16, 50257)),
              64, 24 * GiB),
        Shape("latency-bound small BERT, logits most of its memory, T4 16GB (no bf16)", gpu(
            "T4 16GB", 16, bf16=False, per_sample_time=0.00005, overhead=0.05, recompute_cost=0.2,
            **_transformer(11e6, 4, 128, 256, 4, 30522)), 2048, 16 * GiB, to_static=True),
        Shape("7B decoder full fine-tune, 24GB: its state alone is over the card", gpu(
            "RTX 4090 24GB", 24, per_sample_time=1 / 2, **_transformer(6.74e9, 32, 2048, 4096, 32, 32000)),
              32, 24 * GiB),
    ]
