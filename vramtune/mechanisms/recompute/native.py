"""PaddleNLP models' own recompute, switched on as PaddleNLP's Trainer does (`enable_recompute` on every layer that
has it) with the model's own configuration: `recompute_granularity` (full | full_attn | core_attn) and, where the
model reads it, `no_recompute_layers` (how "r of L" layers is expressed). Both are read when the model is built.

What each architecture honours, read from PaddleNLP 2.8.1's modeling code (the order of their savings is not the
one you would assume, so the search measures them):
- llama, mixtral: full (whole decoder layer), full_attn, core_attn (attention only); no_recompute_layers.
- qwen: full, core_attn.
- gpt: core_attn only: "full" recomputes nothing in 2.8.1, and "full_attn" nests two recomputes and fails.
- everything else with the switch (bert, ernie via PaddleNLP's TransformerEncoder, bloom, chatglm): every layer,
  whatever the granularity; all layers or none.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import paddle

from vramtune.mechanisms.recompute.blocks import BlockError, rng_state_can_be_preserved
from vramtune.memory.layer_kinds import layer_count


@dataclass(frozen=True)
class Support:
    granularities: tuple[str, ...]
    partial: bool  # r of L layers through no_recompute_layers


SUPPORT = {
    "llama": Support(("full", "full_attn", "core_attn"), True),
    "mixtral": Support(("full", "full_attn", "core_attn"), True),
    "qwen": Support(("full", "core_attn"), False),
    "gpt": Support(("core_attn",), False),
}
EVERY_LAYER = Support(("full",), False)


def is_formers(config: Any) -> bool:
    """A PaddleFormers 1.x model's configuration: its models recompute every layer when granularity is full, method
    uniform and the layer count 1 (Llama, Qwen, ERNIE-4.5 code), and nothing otherwise."""
    return type(config).__module__.startswith("paddleformers.")


def support(config: Any) -> Support:
    if is_formers(config):
        return EVERY_LAYER
    return SUPPORT.get(getattr(config, "model_type", ""), EVERY_LAYER)


def configure(config: Any, strategy: Any) -> None:
    """Before the model is built: the granularity and which layers are not recomputed."""
    recomputed, granularity = strategy.recomputed_blocks, strategy.recompute_granularity
    layers, allowed = layer_count(config), support(config)
    kind = getattr(config, "model_type", type(config).__name__)
    if recomputed > layers:
        raise BlockError(f"recomputed_blocks {recomputed} is more than the {layers} layers of this {kind} model")
    if not recomputed:
        return
    if granularity not in allowed.granularities:
        raise BlockError(f"recompute_granularity {granularity!r}: PaddleNLP's {kind} recomputes with "
                         f"{', '.join(allowed.granularities)}")
    if recomputed < layers and not allowed.partial:
        raise BlockError(f"recomputed_blocks {recomputed}: PaddleNLP's {kind} recomputes all {layers} layers or none")
    config.recompute = True
    config.recompute_granularity = granularity
    recompute_without_rng_state_where_it_cannot_be_kept()
    if is_formers(config):
        config.recompute_method, config.recompute_num_layers = "uniform", 1
    if allowed.partial:
        config.no_recompute_layers = list(range(recomputed, layers)) or None


def recompute_without_rng_state_where_it_cannot_be_kept() -> None:
    """The models ask Paddle's recompute to keep the RNG state, which Paddle 2.6 cannot on CPU (it raises "Recompute
    with RNG perserve is not support current device: cpu"): there, as vramtune's own wrapper does (blocks.py), they
    recompute without it. Only dropout masks differ in the recomputation; no memory figure changes."""
    package = importlib.import_module("paddle.distributed.fleet.recompute")  # what fleet.utils.recompute calls
    if rng_state_can_be_preserved() or getattr(package.recompute, "without_rng_state", False):
        return
    keeping = package.recompute

    def recompute(function, *args, **kwargs):
        return keeping(function, *args, **{**kwargs, "preserve_rng_state": False})
    recompute.without_rng_state = True
    package.recompute = recompute


def is_native(model: paddle.nn.Layer) -> bool:
    if is_formers(getattr(model, "config", None)):
        return True
    return hasattr(model, "config") and any(hasattr(layer, "enable_recompute") for layer in model.sublayers())


def enable(model: paddle.nn.Layer, strategy: Any) -> dict[str, Any]:
    """After the model is built: switch recompute on as the Trainer does; what the result records."""
    if strategy.recomputed_blocks:
        for layer in model.sublayers(include_self=True):
            if hasattr(layer, "enable_recompute") and not layer.enable_recompute:
                layer.enable_recompute = True
    allowed = support(model.config)
    return {"total_blocks": layer_count(model.config),
            "block_path": f"{getattr(model.config, 'model_type', 'paddlenlp')} layers "
                          f"({'PaddleFormers' if is_formers(model.config) else 'PaddleNLP'}'s own recompute)",
            "recompute_options": {"granularities": list(allowed.granularities), "partial": allowed.partial}}
