"""What a memory mechanism declares. Paddle-free: the child-side hooks import Paddle inside themselves.

A mechanism owns strategy fields (with their measure flags), spec keys under `search:` (with their probe flags),
a label, its weight in the simpler-wins tie rule, why a device cannot run it, its term in the memory model,
how the child applies it to a model, and how it is exported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from vramtune.reading import Section
    from vramtune.records import Device


@dataclass(frozen=True)
class Field:
    """One strategy field, and the `vramtune measure` flag that sets it."""

    name: str
    type: type
    default: Any
    flag: str
    short: str
    help: str
    check: Callable[[Any], str | None] = lambda value: None
    choices: tuple[str, ...] | None = None  # the values the flag accepts (shown in --help)


@dataclass(frozen=True)
class Option:
    """A `vramtune probe` flag that overrides a spec key (e.g. --no-recompute -> search.recompute: off)."""

    param: str
    flag: str
    type: Any
    default: Any
    help: str
    overrides: Callable[[Any], dict[str, Any]]
    multiple: bool = False
    choices: tuple[str, ...] | None = None


class Mechanism:
    """Defaults: a mechanism with no memory term, no export, supported everywhere."""

    name: str = ""
    fields: tuple[Field, ...] = ()
    options: tuple[Option, ...] = ()
    search_keys: tuple[str, ...] = ()  # keys it reads from the spec's `search:` section
    nonnegative_term = True  # the fitted memory coefficient cannot be negative
    soft_term = False  # taken as 0 while too few probes pin the base line down

    def read_search(self, section: Section) -> Any:
        """Its settings from the spec's `search:` section (problems recorded on the section)."""
        return None

    def read_top(self, root: Section) -> Any:
        """Its settings from the spec's top level, for a mechanism the user fixes rather than the search
        explores (e.g. `devices`); None when it has none."""
        return None

    def label(self, strategy: Any, total_blocks: int | None = None) -> str:
        """Its part of a strategy's label ("" when off); total_blocks, where known, for a count out of the model's."""
        return " ".join(f"{field.short.lstrip('-')}={getattr(strategy, field.name)}" for field in self.fields)

    def weight(self, strategy: Any) -> int:
        """0 when the mechanism is off; larger is more complex (the tie rule prefers fewer and smaller)."""
        return 0

    def unsupported(self, strategy: Any, device: Device) -> str | None:
        return None

    def memory_term(self, strategy: Any) -> float:
        """The feature whose fitted coefficient is this mechanism's memory effect; 0 when off."""
        return 0.0

    def known_saving(self, strategy: Any, counts: dict[str, float]) -> float:
        """Bytes the mechanism saves that follow from counted sizes rather than a fit (counts: weight, gradient
        and optimizer bytes of the unpartitioned model), e.g. sharding divides state by the ranks."""
        return 0.0

    def memory_group(self, strategy: Any) -> str:
        """Strategies in different groups get separate memory models (fp32 vs AMP)."""
        return ""

    def configure_model(self, config: Any, strategy: Any, block_path: str | None) -> None:
        """Child side, before the model is built: set what a model reads from its configuration at construction
        (PaddleNLP's recompute granularity and layers). Only sources with such a configuration call it."""

    def prepare_model(self, model: Any, strategy: Any, block_path: str | None) -> dict[str, Any]:
        """Child side: change the model before training; returns result fields it learned."""
        return {}

    def prepare_training(self, model: Any, optimizer: Any, strategy: Any) -> tuple[Any, Any]:
        """Child side, once the optimizer exists: wrap model and optimizer (data parallel, sharding)."""
        return model, optimizer

    def wrap_scaler(self, scaler: Any, strategy: Any) -> Any:
        """Child side: the fp16 loss scaler as this mechanism needs it (sharding: one that agrees across ranks)."""
        return scaler

    def launcher(self, strategy: Any) -> list[str] | None:
        """The command a probe runs under instead of plain Python (multi-rank probes), or None."""
        return None

    def paddlenlp(self, tuned: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """TrainingArguments keys for the tuned values, and warnings for what does not map."""
        return {}, []
