"""Counting a model's parameters without allocating them, for `vramtune estimate`: the full model is built under
`paddle.LazyGuard` (parameters created without memory) and, for PaddleNLP models, PaddleNLP's own `no_init_weights`
(its weight initialisation would otherwise allocate every parameter: a 7B Llama is counted in a second, in half a
GiB), then the mechanisms that change the parameters (LoRA, prefix tuning) are applied the same way.

What is counted is what decides the state bytes of each precision: every parameter, the trainable ones, those AMP O2
keeps in fp32 (BatchNorm's, and LayerNorm's under fp16), and the weights of matmul and conv layers (AMP O1 keeps a
half copy of each for backward).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import paddle

from vramtune.child.preparing import configure
from vramtune.core.records import ProbeJob
from vramtune.core.strategy import Strategy
from vramtune.memory.layer_kinds import BATCHNORM, LAYERNORM, MATMUL, layer_count
from vramtune.plugins import MECHANISMS, SOURCES

# the configuration's depth, width and vocabulary, as the estimate shrinks them for its probes
SHAPE_KEYS = ("num_hidden_layers", "num_layers", "hidden_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "vocab_size")


@contextlib.contextmanager
def lazy_parameters(paddlenlp: bool) -> Iterator[None]:
    """Parameters created without memory (and, for PaddleNLP models, without PaddleNLP's weight initialisation)."""
    with contextlib.ExitStack() as stack:
        if paddlenlp:
            from paddlenlp.transformers.model_utils import no_init_weights

            stack.enter_context(no_init_weights(_enable=True))
        stack.enter_context(paddle.LazyGuard())
        yield


def _size(parameter: Any) -> int:
    return math.prod(parameter.shape)


def count(job: ProbeJob) -> dict[str, Any]:
    """The model's parameter counts, built as the probes build it (configure, build, prepare_model) but lazily."""
    paddle.set_device("cpu")  # nothing is allocated; and nothing touches a GPU
    source = SOURCES[job.source]
    strategy = Strategy.from_json(job.strategy)
    with lazy_parameters(job.source == "paddlenlp"):
        built = source.build(source.from_json(job.model), job.spec_dir,
                             lambda config: configure(config, strategy, job.settings))
        model = built.model
        for mechanism in MECHANISMS:
            model, _ = mechanism.prepare_model(model, strategy, job.settings.get(mechanism.name))
    config = built.config
    counts = {"params": 0, "trainable": 0, "batchnorm": 0, "layernorm": 0, "matmul": 0,
              "layers": layer_count(config) if config is not None else 0,
              "shape": {key: getattr(config, key) for key in SHAPE_KEYS if getattr(config, key, None)}
              if config is not None else {}, **built.held}
    seen: set[int] = set()  # a parameter held by two layers (an RNN's and its cells') is counted once
    for layer in model.sublayers(include_self=True):
        own = [p for p in layer.parameters(include_sublayers=False) if id(p) not in seen]
        seen.update(id(p) for p in own)
        counts["params"] += sum(_size(p) for p in own)
        counts["trainable"] += sum(_size(p) for p in own if not p.stop_gradient)
        if isinstance(layer, BATCHNORM):
            counts["batchnorm"] += sum(_size(p) for p in own)
        elif isinstance(layer, LAYERNORM):
            counts["layernorm"] += sum(_size(p) for p in own)
        elif isinstance(layer, MATMUL):
            counts["matmul"] += _size(layer.weight)
    return counts
