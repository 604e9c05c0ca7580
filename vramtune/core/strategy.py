"""A strategy: one value for every field of every registered mechanism (precision, micro_batch, accumulation,
recomputed_blocks, ...). Pure data, importable without Paddle; its fields come from the registry, so a new
mechanism's fields appear here (with their defaults, even in strategies made before it was registered)."""
from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

from vramtune.mechanisms import MECHANISMS, field_named, strategy_fields


class Strategy:
    """One probe's memory strategy: a value per mechanism field. Immutable and hashable."""

    __slots__ = ("_values",)

    def __init__(self, **values: Any):
        for name in values:
            if field_named(name) is None:
                raise TypeError(f"Strategy has no field {name!r}")
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        field = field_named(name)
        if field is None:
            raise AttributeError(f"Strategy has no field {name!r}")
        return object.__getattribute__(self, "_values").get(name, field.default)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def _key(self) -> tuple:
        return tuple(getattr(self, field.name) for field in strategy_fields())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Strategy) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Strategy({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in strategy_fields())})"

    @property
    def batch(self) -> int:
        """Samples per optimizer step, over every data-parallel rank."""
        return self.micro_batch * self.accumulation * self.devices

    def to_json(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in strategy_fields()}

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

    def label(self, without: tuple[str, ...] = (), facts: dict[str, dict[str, Any]] | None = None) -> str:
        """e.g. "bf16 m=8 k=4 r=2": each mechanism's part but those named in `without`; with the model's facts,
        counts out of the model's (r=2/12)."""
        facts = facts or {}
        parts = (m.label(self, facts.get(m.name, {})) for m in MECHANISMS if m.name not in without)
        return " ".join(part for part in parts if part)

    def with_(self, **changes: Any) -> Strategy:
        return Strategy(**{**object.__getattribute__(self, "_values"), **changes})
