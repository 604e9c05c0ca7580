"""A validated spec: the records `spec/schema.py` reads a spec file into (every dialect's file becomes one). Pure
data: the model source's and each mechanism's settings are theirs (typed by them), kept here by name."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def ranks(settings: dict[str, Any]) -> int:
    """The data-parallel ranks a spec's settings fix for the whole run (its `devices:` key, which data parallel
    reads): every strategy of the run has them."""
    return settings.get("data_parallel") or 1


@dataclass
class TrainSettings:
    target_batch: int
    optimizer: str = "adamw"
    learning_rate: float = 5.0e-5
    max_grad_norm: float | None = None  # gradient clipping by global norm (PaddleNLP's Trainer: 1.0)


@dataclass
class ProbeSettings:
    steps: int = 3
    warmup: int = 1
    timeout: float = 300.0


@dataclass
class Spec:
    name: str
    source: str
    model: Any  # the source's settings (its model: and data: keys)
    train: TrainSettings
    device: str = "auto"
    budget: int | None = None  # None = auto (the device's total memory)
    headroom: float = 0.05
    settings: dict[str, Any] = field(default_factory=dict)  # mechanism name -> its settings
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    tuned: dict[str, Any] | None = None  # written by `vramtune apply`
    arguments: dict[str, Any] | None = None  # the PaddleNLP arguments file this spec was read from, if any
    dialect: str = "spec"  # the dialect whose file it was read from (dialects/NAME/dialect.py)
    warnings: list[str] = field(default_factory=list)  # what the user should know about the file (unknown keys)
    path: str = "<spec>"
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def base_dir(self) -> str:
        return str(Path(self.path).resolve().parent)

    @property
    def devices(self) -> int:
        return ranks(self.settings)

    def micro_batches(self) -> list[int]:
        """The micro-batch candidates that reach the target batch (over every rank), largest first."""
        return self.settings["accumulation"].candidates(self.train.target_batch // self.devices)
