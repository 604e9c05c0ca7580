"""What crosses the boundary when the user's own tool verifies an answer (issue 36): the request a dialect turns into
a bounded run of its tool, the run itself, and what the run measured. Pure data."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramtune.core.records import Device
from vramtune.core.spec import Spec
from vramtune.core.strategy import Strategy

STEPS = 3  # optimizer steps a verification runs: the first pays what a first step pays; the next ones what later do
EVAL_STEPS = 3  # evaluation steps of the one evaluation pass, where the file evaluates (more: its eval accumulation)


def evaluation_steps(accumulation_steps: int | None, own: int | None = None) -> int:
    """The evaluation steps a verification's one pass runs: EVAL_STEPS, or the file's eval_accumulation_steps where
    larger (its kept steps are moved off the device at the last, the peak the probe counts), or the file's own
    max_evaluate_steps where smaller (its real run evaluates no more)."""
    steps = max(EVAL_STEPS, accumulation_steps or 0)
    return min(steps, own) if own and own > 0 else steps


@dataclass(frozen=True)
class VerifyRequest:
    """What a dialect is asked to verify: the spec as read, the tuned file written for it, the strategy that file
    states, the device the probes ran on, a scratch folder of the run's own, and the command the user named
    (`--verify-with`: `{file}` stands for the tuned file), if any."""

    spec: Spec
    tuned_file: Path
    strategy: Strategy
    device: Device
    scratch: Path
    command: str | None = None


@dataclass(frozen=True)
class ToolRun:
    """A bounded run of the user's own tool: its command, where it runs, what it adds to the environment, its name in
    words ("PaddleFormers' workflow"), what differs from the user's own run on this device (CPU substitutions), and
    the evaluation batch of the one evaluation pass it runs after its bounded steps (None: the file does not
    evaluate, or the run cannot)."""

    tool: str
    argv: list[str]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    eval_batch: int | None = None


@dataclass
class Verified:
    """What a verification measured. status: "fits" / "over_budget" (the larger of the tool's training and
    evaluation peaks against the budget's limit), "failed" (the tool did not train: its error), "skipped" (no run
    here: why). Where the file evaluates, the run's one evaluation pass is its own phase: `eval_batch` the batch it
    ran at, `eval_peak_bytes` its peak (None: no evaluation ran), beside the probe's at that batch."""

    tool: str
    status: str
    peak_bytes: int | None = None  # the tool's training peak, from the counters the probes read (reserved on a GPU)
    probe_bytes: int | None = None  # the probe's peak for the same strategy
    seconds: float = 0.0
    steps: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    eval_batch: int | None = None  # the evaluation batch of the run's evaluation pass (None: the run did not evaluate)
    eval_peak_bytes: int | None = None  # the tool's evaluation peak, training state resident (None: none ran)
    probe_eval_bytes: int | None = None  # the probe's evaluation peak at that batch (what it keeps counted)
    eval_steps: int | None = None  # evaluation steps the pass ran

    @property
    def ratio(self) -> float | None:
        """The tool's training peak over the probe's."""
        return self.peak_bytes / self.probe_bytes if self.peak_bytes and self.probe_bytes else None

    @property
    def eval_ratio(self) -> float | None:
        """The tool's evaluation peak over the probe's."""
        return (self.eval_peak_bytes / self.probe_eval_bytes if self.eval_peak_bytes and self.probe_eval_bytes
                else None)

    @property
    def used_bytes(self) -> int | None:
        """What must fit: the larger of the two phases' peaks."""
        return max(filter(None, (self.peak_bytes, self.eval_peak_bytes)), default=None)

    def to_json(self) -> dict[str, Any]:
        evaluation = None if self.eval_batch is None else {
            "batch": self.eval_batch, "peak_bytes": self.eval_peak_bytes, "probe_bytes": self.probe_eval_bytes,
            "ratio": round(self.eval_ratio, 4) if self.eval_ratio else None, "steps": self.eval_steps}
        return {"tool": self.tool, "status": self.status, "peak_bytes": self.peak_bytes,
                "probe_bytes": self.probe_bytes, "ratio": round(self.ratio, 4) if self.ratio else None,
                "seconds": round(self.seconds, 2), "steps": self.steps, "notes": self.notes, "error": self.error,
                "evaluation": evaluation}
