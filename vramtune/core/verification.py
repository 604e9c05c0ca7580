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
    words ("PaddleFormers' workflow"), and what differs from the user's own run on this device (CPU substitutions)."""

    tool: str
    argv: list[str]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Verified:
    """What a verification measured. status: "fits" / "over_budget" (the tool's peak against the budget's limit),
    "failed" (the tool did not train: its error), "skipped" (no run here: why)."""

    tool: str
    status: str
    peak_bytes: int | None = None  # the tool's peak, from the counters the probes read (reserved on a GPU)
    probe_bytes: int | None = None  # the probe's peak for the same strategy
    seconds: float = 0.0
    steps: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """The tool's peak over the probe's."""
        return self.peak_bytes / self.probe_bytes if self.peak_bytes and self.probe_bytes else None

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "status": self.status, "peak_bytes": self.peak_bytes,
                "probe_bytes": self.probe_bytes, "ratio": round(self.ratio, 4) if self.ratio else None,
                "seconds": round(self.seconds, 2), "steps": self.steps, "notes": self.notes, "error": self.error}
