"""Typed, Paddle-free records for what crosses a boundary: the device, the budget, the probe job (everything
the child needs) and the probe result. The child measures; the parent (Budget) decides what fits.

What the mechanisms learn about the model travels in `ProbeResult.facts`, flat (each key named once: FACTS); what a
mechanism needs in the child in `ProbeJob.settings[mechanism name]`."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable

from vramtune.core.strategy import Facts, Strategy

Judge = Callable[["ProbeResult", float], "str | None"]  # why a result does not fit the limit after all, or None
MEASURED_STATUSES = ("fits", "over_budget")
STATUSES = ("fits", "over_budget", "oom", "crashed", "timeout", "unstable", "unsupported")
# What the probes learn about the model, in the order JSON says them. A mechanism that learns something new adds its
# key here (as a field of its own is added to Strategy).
FACTS = (
    "trainable_params", "total_params", "peft",  # LoRA / prefix tuning: the parameters trained, the settings applied
    "batchnorm_layers",  # the BatchNorm floor of the micro-batch
    "total_blocks", "block_path", "recompute_options",  # recompute: the repeated blocks; a model's own granularities
    "rank_peak_bytes",  # every rank's peak (peak_bytes is the largest)
    # evaluation: the largest measured evaluation batch that fits (None: none fits), the one asked, batch -> the peak
    # of one evaluation step, batch -> bytes one step keeps on the device, steps kept before moving to the host
    "eval_batch", "eval_requested", "eval_peaks", "eval_kept", "eval_accumulation_steps",
)


@dataclass(frozen=True)
class Device:
    kind: str  # cpu | gpu
    index: int
    name: str
    total_bytes: int
    paddle_version: str
    amp_unsupported: dict[str, str] = field(default_factory=dict)  # precision -> why it cannot run here
    count: int = 1  # devices of this kind on the machine (GPUs; CPU cores for CPU ranks)
    buses: list[str] = field(default_factory=list)  # each GPU's PCI bus id by ordinal (its lock's name), where known
    free_bytes: int | None = None  # a GPU's free memory when it was described (budget auto), where Paddle says
    holders: list[int] = field(default_factory=list)  # the processes nvidia-smi saw computing on it then

    @property
    def paddle_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"gpu:{self.index}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Device:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


@dataclass(frozen=True)
class Budget:
    """The memory a configuration may use: budget bytes less a headroom fraction."""

    bytes: int
    headroom: float

    @property
    def limit(self) -> float:
        return self.bytes * (1 - self.headroom)

    def fits(self, used: int | None) -> bool:
        return used is not None and used <= self.limit

    def needed_for(self, used: int) -> int:
        """The smallest budget under which `used` bytes would fit."""
        return int(used / (1 - self.headroom)) + 1


@dataclass
class ProbeJob:
    """All the child needs for one probe, and nothing it could disagree with the parent about."""

    source: str
    model: dict[str, Any]  # the source's validated settings, as JSON
    spec_path: str  # as the user gave it (for messages)
    spec_dir: str  # its folder, absolute: the child runs in a temporary folder of its own
    optimizer: str
    learning_rate: float
    strategy: dict[str, Any]
    device: dict[str, Any]
    steps: int
    warmup: int
    settings: dict[str, Any] = field(default_factory=dict)  # mechanism name -> what its child hooks need
    max_grad_norm: float | None = None  # the optimizer clips gradients by their global norm (as the Trainer does)
    seed: int = 0
    check_sample: bool = True  # one sample through the model first (shape errors as BuildError); off once one measured
    memory_only: bool = False  # the estimate's probes: the peak, not the speed (a warmup without a forward pass;
    # its step's seconds include what a first step pays)
    until_rebuild: bool = False  # memory only until backward first rebuilds a recomputed block (the step ends there)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeJob:
        return cls(**data)


def facts_in(data: dict[str, Any]) -> Facts:
    """The facts of a JSON record (those reported), in FACTS' order."""
    return {key: data[key] for key in FACTS if data.get(key) is not None}


@dataclass
class ProbeResult:
    """One probe: the strategy, what was measured, and how it ended. `status` is decided by the parent for
    measured probes (fits / over_budget) and by what happened otherwise."""

    status: str
    strategy: Strategy
    peak_bytes: int | None = None
    reserved_bytes: int | None = None
    step_seconds: float | None = None
    samples_per_sec: float | None = None
    loss: float | None = None
    budget_bytes: int | None = None
    device: dict[str, Any] | None = None  # {name, kind}
    paddle_version: str | None = None
    error: str | None = None
    error_kind: str | None = None  # "build": the model cannot be built (a user error)
    optimizer_state: bool | None = None  # the optimizer's state existed when the peak was measured
    weight_bytes: int | None = None  # counted in the child (per rank)
    gradient_bytes: int | None = None
    optimizer_bytes: int | None = None
    facts: Facts = field(default_factory=dict)  # what the probe learned about the model
    phases: dict[str, float] | None = None  # wall seconds of the probe's phases in the child (import, build, ...)
    seconds: float = 0.0
    rung: str | None = None
    reused: bool = False

    @property
    def used_bytes(self) -> int | None:
        """The memory that must fit: reserved where the device reports it (GPU), else allocated."""
        return self.reserved_bytes if self.reserved_bytes is not None else self.peak_bytes

    @property
    def state_bytes(self) -> int | None:
        """Weights + gradients + optimizer state: what does not grow with the micro-batch."""
        parts = (self.weight_bytes, self.gradient_bytes, self.optimizer_bytes)
        return None if None in parts else sum(parts)

    @property
    def measured(self) -> bool:
        return self.status in MEASURED_STATUSES

    @property
    def fits(self) -> bool:
        return self.status == "fits" and bool(self.samples_per_sec)

    def label(self) -> str:
        return self.strategy.label(facts=self.facts)

    def breakdown(self) -> dict[str, int] | None:
        """What fills the peak: the counted weights, gradients and optimizer state, the activations and
        temporaries (the rest of the allocated peak), and on GPU what the allocator reserved beyond it. None where
        the counted state is above the peak (a count that cannot be right has no part to say)."""
        if self.peak_bytes is None or self.state_bytes is None or self.state_bytes > self.peak_bytes:
            return None
        parts = {"weights": self.weight_bytes, "gradients": self.gradient_bytes,
                 "optimizer_state": self.optimizer_bytes, "activations": self.peak_bytes - self.state_bytes}
        if self.reserved_bytes is not None:
            parts["fragmentation"] = self.reserved_bytes - self.peak_bytes
        return parts

    def to_json(self) -> dict[str, Any]:
        data = {"status": self.status, **self.strategy.to_json()}
        for item in dataclasses.fields(self):
            if item.name not in ("status", "strategy", "facts"):
                data[item.name] = getattr(self, item.name)
        data.update(facts_in(self.facts))
        data["breakdown"] = self.breakdown()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        names = {f.name for f in dataclasses.fields(cls)} - {"strategy", "facts"}
        return cls(strategy=Strategy.from_json(data), facts=facts_in(data),
                   **{k: v for k, v in data.items() if k in names})

    def judged(self, budget: Budget, phases: Iterable[Judge] = ()) -> ProbeResult:
        """A measured result classified against the budget (the parent's decision, not the child's): its peak
        must fit, and so must every phase a mechanism measured besides training (`phases`: why it does not)."""
        if self.status not in ("measured", *MEASURED_STATUSES):
            return self
        reasons = [] if budget.fits(self.used_bytes) else [
            f"peak {self.used_bytes} bytes > {int(budget.limit)} bytes (budget less headroom)"]
        reasons += [why for judge in phases if (why := judge(self, budget.limit))]
        return dataclasses.replace(self, status="over_budget" if reasons else "fits",
                                   error="; ".join(reasons) or None, budget_bytes=budget.bytes)
