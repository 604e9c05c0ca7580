"""What a model source declares: its settings (the spec's `model:` and `data:` keys, validated Paddle-free)
and its builder (which imports Paddle, in the child only), and what a builder returns."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from vramtune.core.reading import Section
    from vramtune.core.records import Device
    from vramtune.core.strategy import Strategy


@dataclass
class BuiltModel:
    model: Any  # paddle.nn.Layer
    make_batch: Callable[[int], Any]  # micro_batch -> batch
    loss: Callable[[Any, Any], Any]  # (model, batch) -> scalar loss tensor
    config: Any = None  # the model's configuration object, where it has one (PaddleNLP)
    after_step: Callable[[], None] | None = None  # what the user's loop does after each optimizer step (a kit's EMA
    #                                               update): the training steps call it, so the probe measures it
    held: dict[str, int] = dataclasses.field(default_factory=dict)  # what that loop holds beside the state, as
    #                    the estimate counts it (estimating.model.Counts: ema_elements, state_copies; PaddleOCR's EMA)
    read_ahead: Callable[[int, bool], int] | None = None  # (accumulation, training) -> the batches the tool's
    #   DataLoader holds beside the one trained on (training) or evaluated (not), in the probed device's allocator:
    #   the probe holds as many of make_batch's through its measured steps and evaluation (sources/loader.py)


class Source:
    name: str = ""
    settings: type  # a dataclass holding the source's model and data keys
    modules: tuple[str, ...] = ()  # what its builder imports (a warm worker imports them once, before forking)
    shapes_per_step: bool = False  # its steps take turns over input shapes (a multi-scale sampler): the estimate's
    # probes measure the spec's steps, every shape, not one
    o2_built_in_half: bool = False  # its tool builds an AMP O2 model in the half type (Paddle's default dtype set to
    # it while building), not in fp32 cast by decorate: PaddleFormers' and PaddleNLP's llm workflows

    def read(self, model: Section, data: Section) -> Any:
        """The settings from the spec's sections; problems are recorded on the sections."""
        raise NotImplementedError

    def build(self, settings: Any, spec_dir: str, configure: Callable[[Any], None]) -> BuiltModel:
        """Child side: the model with random weights, a batch maker and the loss. A source whose models read
        settings from a configuration at construction passes it to `configure` first (the mechanisms' hook)."""
        raise NotImplementedError

    def refusal(self, settings: Any, file: str) -> str | None:
        """Why no probe can measure this model at all (what vramtune only estimates), or None: said as bad input by
        the commands that probe, before any probe."""
        return None

    def unsupported(self, settings: Any, strategy: Strategy, device: Device) -> str | None:
        """Why the model cannot train under the strategy on the device (Paddle has no kernel for what its layers run
        there: flash attention in fp32 on a GPU), or None. Said before any probe, as a mechanism's reasons are."""
        return None

    def model_shape(self, settings: Any) -> tuple[str, int, str] | None:
        """(the model folder holding its config.json, the sequence length a probe measures, the attention the run
        asks for), for the search's activation prior (memory/prior.py); None: the model has no such folder."""
        return None

    def notes(self, settings: Any, device_kind: str) -> list[str]:
        """What the report should say about measuring this model on this kind of device."""
        return []

    def measured_notes(self, settings: Any, device_kind: str) -> list[str]:
        """What `vramtune measure` says beside one probe's numbers: which input it measured, where the source chose it
        from the data, and what it counts rather than measures."""
        return []

    def suggestions(self, settings: Any, tips: list[str]) -> list[str]:
        """The search's advice when nothing fits, as this source's users say it: a tool whose config names the spec's
        keys otherwise (a kit's) rewrites them, and drops the advice it cannot follow."""
        return tips

    def found_from(self, settings: Any, model: dict[str, Any], folder: str) -> dict[str, str | None]:
        """What the spec's keys name that is looked for from the spec's folder, as a spec in `folder` would find it:
        key -> the file (None: not found); `model`: the spec's model: mapping as written. A tuned spec written to
        another folder must find the same (apply); `elsewhere` says how else it can ({found}: the file, {folder}:
        its folder)."""
        return {}

    elsewhere = ""

    def identity(self, settings: Any, spec_dir: str) -> dict[str, Any]:
        """What else decides the measurements besides the spec's text (e.g. a factory module's source)."""
        return {}

    def to_json(self, settings: Any) -> dict[str, Any]:
        return dataclasses.asdict(settings)

    def from_json(self, data: dict[str, Any]) -> Any:
        return self.settings(**data)
