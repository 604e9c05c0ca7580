"""What a model source declares: its settings (the spec's `model:` and `data:` keys, validated Paddle-free)
and its builder (which imports Paddle, in the child only)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from vramtune.child.building import BuiltModel
    from vramtune.reading import Section


class Source:
    name: str = ""
    settings: type  # a dataclass holding the source's model and data keys

    def read(self, model: Section, data: Section) -> Any:
        """The settings from the spec's sections; problems are recorded on the sections."""
        raise NotImplementedError

    def build(self, settings: Any, spec_dir: str, configure: Callable[[Any], None]) -> BuiltModel:
        """Child side: the model with random weights, a batch maker and the loss. A source whose models read
        settings from a configuration at construction passes it to `configure` first (the mechanisms' hook)."""
        raise NotImplementedError

    def identity(self, settings: Any, spec_dir: str) -> dict[str, Any]:
        """What else decides the measurements besides the spec's text (e.g. a factory module's source)."""
        return {}

    def to_json(self, settings: Any) -> dict[str, Any]:
        return dataclasses.asdict(settings)

    def from_json(self, data: dict[str, Any]) -> Any:
        return self.settings(**data)
