"""A strategy: one value for every field of every registered mechanism (precision, micro_batch, accumulation,
recomputed_blocks, ...). Pure data, importable without Paddle; built from the registry, so a new mechanism's
fields appear here without editing this file."""
from __future__ import annotations

import dataclasses
from typing import Any

from vramtune.mechanisms import MECHANISMS, strategy_fields


class _StrategyMethods:
    """Behaviour shared by the generated Strategy dataclass."""

    micro_batch: int
    accumulation: int

    @property
    def batch(self) -> int:
        """Samples per optimizer step, over every data-parallel rank."""
        return self.micro_batch * self.accumulation * getattr(self, "devices", 1)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Strategy:
        """From a result or a tuned: section; missing fields take their defaults, wrong types raise."""
        values = {}
        for field in strategy_fields():
            value = data.get(field.name, field.default)
            if field.type is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{field.name} must be an integer, got {value!r}")
            if field.type is str and not isinstance(value, str):
                raise ValueError(f"{field.name} must be a string, got {value!r}")
            if field.type is bool and not isinstance(value, bool):
                raise ValueError(f"{field.name} must be true or false, got {value!r}")
            values[field.name] = value
        return cls(**values)

    def label(self, without: tuple[str, ...] = (), total_blocks: int | None = None) -> str:
        """e.g. "bf16 m=8 k=4 r=2": each mechanism's part but those named in `without`; total_blocks shows the
        recomputed blocks out of the model's (r=2/12)."""
        parts = (m.label(self, total_blocks) for m in MECHANISMS if m.name not in without)
        return " ".join(part for part in parts if part)

    def with_(self, **changes: Any) -> Strategy:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


Strategy = dataclasses.make_dataclass(
    "Strategy", [(f.name, f.type, dataclasses.field(default=f.default)) for f in strategy_fields()],
    bases=(_StrategyMethods,), frozen=True, namespace={"__module__": __name__})
Strategy.__doc__ = "One probe's memory strategy: a value per mechanism field."
