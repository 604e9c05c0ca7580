"""A memory strategy: precision, micro-batch, gradient accumulation and recomputed blocks.

Pure data, importable without Paddle (the parent process never imports Paddle); `vramtune.training` applies it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Strategy:
    precision: str  # fp32 | fp16 | bf16
    micro_batch: int
    accumulation: int
    recompute_layers: int

    @property
    def batch(self) -> int:
        return self.micro_batch * self.accumulation

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Strategy:
        return cls(data["precision"], int(data["micro_batch"]), int(data["accumulation"]),
                   int(data["recompute_layers"]))

    def label(self) -> str:
        return f"{self.precision} m={self.micro_batch} k={self.accumulation} r={self.recompute_layers}"
