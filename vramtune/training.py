"""Training under a Strategy: AMP, gradient accumulation and per-block recompute.

The probe worker and `vramtune.runtime` both train through `StepRunner`, so users train exactly what was measured.
"""
from __future__ import annotations

from typing import Any, Callable

import paddle
from paddle.distributed.fleet.utils import recompute

from vramtune.strategy import Strategy

AMP_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


class BlockError(ValueError):
    """The recompute block path does not resolve to a list of blocks."""


def _resolve(model: paddle.nn.Layer, path: str) -> Any:
    node: Any = model
    for part in path.split("."):
        if part.isdigit() and isinstance(node, (paddle.nn.LayerList, paddle.nn.Sequential)):
            node = node[int(part)]
        elif isinstance(node, paddle.nn.Layer) and part in node._sub_layers:
            node = node._sub_layers[part]
        else:
            children = ", ".join(node._sub_layers) if isinstance(node, paddle.nn.Layer) else "none"
            raise BlockError(f"model.recompute_blocks: {path!r} does not resolve: no {part!r} "
                             f"(children there: {children})")
    return node


def _same_type_children(container: paddle.nn.Layer) -> list[tuple[paddle.nn.Layer, str]] | None:
    """[(container, key)] when every child of a LayerList/Sequential has one type, else None."""
    if not isinstance(container, (paddle.nn.LayerList, paddle.nn.Sequential)) or not container._sub_layers:
        return None
    types = {type(child) for child in container._sub_layers.values()}
    return [(container, key) for key in container._sub_layers] if len(types) == 1 else None


def find_blocks(model: paddle.nn.Layer, path: str | None = None) -> list[tuple[paddle.nn.Layer, str]]:
    """The repeated blocks to recompute, in forward order, as (container, key) slots.

    With a path, the LayerList/Sequential there. Otherwise the block type repeated most across
    LayerLists/Sequentials (for ResNet: the residual blocks of all stages in order).
    """
    if path:
        container = _resolve(model, path)
        slots = _same_type_children(container)
        if slots is None:
            raise BlockError(f"model.recompute_blocks: {path!r} is {type(container).__name__}, not a "
                             "LayerList/Sequential of blocks of one type")
        return slots
    by_type: dict[type, list[tuple[paddle.nn.Layer, str]]] = {}
    for _, container in model.named_sublayers(include_self=True):
        slots = _same_type_children(container)
        if slots and not isinstance(slots[0][0]._sub_layers[slots[0][1]], RecomputeBlock):
            block_type = type(container._sub_layers[slots[0][1]])
            if block_type.__module__.startswith("paddle.nn.layer.") and not list(
                    container._sub_layers[slots[0][1]].children()):
                continue  # a list of plain leaf layers (Linear, ReLU) is not a block list
            by_type.setdefault(block_type, []).extend(slots)
    return max(by_type.values(), key=len) if by_type else []


class RecomputeBlock(paddle.nn.Layer):
    """Runs the wrapped block under recompute: its activations are rebuilt in backward instead of kept."""

    def __init__(self, inner: paddle.nn.Layer):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        if not self.training:
            return self.inner(*args, **kwargs)
        return recompute(self.inner, *args, use_reentrant=False, **kwargs)


def block_path(model: paddle.nn.Layer, slots: list[tuple[paddle.nn.Layer, str]]) -> str | None:
    """The dotted path(s) of the containers holding the blocks, e.g. 'bert.encoder.layers' or 'layer1,layer2'."""
    names = {id(layer): name for name, layer in model.named_sublayers(include_self=True)}
    paths = list(dict.fromkeys(names[id(container)] for container, _ in slots))
    return ",".join(paths) if paths else None


def apply_recompute(model: paddle.nn.Layer, layers: int, path: str | None = None) -> tuple[int, str | None]:
    """Wrap the first `layers` blocks in RecomputeBlock; returns (L, the blocks found; their container path)."""
    slots = find_blocks(model, path)
    if layers > len(slots):
        raise BlockError(f"recompute_layers {layers} is more than the {len(slots)} repeated blocks found")
    found = block_path(model, slots)
    for container, key in slots[:layers]:
        container._sub_layers[key] = RecomputeBlock(container._sub_layers[key])
    return len(slots), found


class StepRunner:
    """Trains one micro-batch at a time under a strategy; steps the optimizer every `accumulation` calls."""

    def __init__(self, model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer, strategy: Strategy):
        self.model, self.optimizer, self.strategy = model, optimizer, strategy
        self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**15) if strategy.precision == "fp16" else None
        self.pending = 0  # micro-batches since the last optimizer step

    def micro_step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> tuple[paddle.Tensor, bool]:
        """Forward+backward one micro-batch; returns (unscaled loss, whether the optimizer stepped)."""
        precision = self.strategy.precision
        with paddle.amp.auto_cast(enable=precision != "fp32", dtype=AMP_DTYPES.get(precision, "float16"),
                                  level="O1"):
            loss = loss_fn(batch)
        scaled = loss / self.strategy.accumulation
        (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        self.pending += 1
        if self.pending < self.strategy.accumulation:
            return loss, False
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.clear_grad(set_to_zero=False)
        self.pending = 0
        return loss, True

    def train_step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> float:
        """One optimizer step over `accumulation` micro-batches (the same batch); mean loss."""
        total = 0.0
        for _ in range(self.strategy.accumulation):
            loss, _ = self.micro_step(loss_fn, batch)
            total += float(loss)
        return total / self.strategy.accumulation


def make_optimizer(name: str, learning_rate: float, parameters) -> paddle.optimizer.Optimizer:
    return {
        "adamw": paddle.optimizer.AdamW,
        "adam": paddle.optimizer.Adam,
        "sgd": paddle.optimizer.SGD,
        "momentum": paddle.optimizer.Momentum,
    }[name](learning_rate=learning_rate, parameters=parameters)
