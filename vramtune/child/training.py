"""Training under a Strategy: the mechanisms' forward contexts (AMP) and loss scaler, gradient accumulation.

The probe worker and `vramtune.runtime` both train through `StepRunner`, so users train exactly what was measured.
It names no mechanism: precision brings auto_cast and the GradScaler, sharding wraps the scaler.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Callable

import paddle

from vramtune.plugins import MECHANISMS

OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "momentum": "Momentum"}
STATELESS = ("sgd",)  # optimizers that keep no per-parameter state


class StepRunner:
    """Trains one micro-batch at a time under a strategy; steps the optimizer every `accumulation` calls."""

    def __init__(self, model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer, strategy: Any,
                 settings: dict[str, Any] | None = None):
        """settings: each mechanism's child settings (its auto_cast lists, say), by mechanism name."""
        self.model, self.optimizer, self.strategy = model, optimizer, strategy
        self.settings = settings or {}
        self.scaler = None
        for mechanism in MECHANISMS:
            self.scaler = mechanism.scaler(self.scaler, strategy, self.settings.get(mechanism.name))
        self.pending = 0  # micro-batches since the last optimizer step
        self.after_step: Callable[[], None] | None = None  # the model source's (a kit's EMA update)

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:
        """Every mechanism's forward context (AMP's auto_cast), for training and evaluation forwards alike."""
        with contextlib.ExitStack() as stack:
            for mechanism in MECHANISMS:
                stack.enter_context(mechanism.forward_context(self.strategy, self.settings.get(mechanism.name)))
            yield

    def micro_step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> tuple[paddle.Tensor, bool]:
        """Forward+backward one micro-batch; returns (unscaled loss, detached, whether the optimizer stepped).

        The loss is detached as PaddleNLP's Trainer does: a loss tensor kept alive keeps its graph's recompute
        inputs alive too, into the next micro-batch."""
        with self.forward_context():
            loss = loss_fn(batch)
        scaled = loss / self.strategy.accumulation
        (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        self.pending += 1
        loss = loss.detach()
        if self.pending < self.strategy.accumulation:
            return loss, False
        self._optimizer_step()
        return loss, True

    def _optimizer_step(self) -> None:
        if self.scaler:
            self.scaler.step(self.optimizer)  # skips the update when it finds inf/nan gradients
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.clear_grad()  # Paddle's default, as PaddleNLP's Trainer and most loops: grads kept, zeroed
        if self.after_step:
            self.after_step()
        self.pending = 0

    def warmup_step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> float:
        """A step's last micro-batch and the optimizer step; its loss.

        It pays what a first step pays once and later steps do not (the first forward and backward, the gradients'
        creation, the optimizer's state and first update, the scaler's first step, the zeroing) at 1/accumulation
        of a whole step; the steps after it cost what later steps cost (bench/warmup_bias.py). It peaks below a
        whole step, never above: a whole step's accumulation peaks in the steps measured after it."""
        self.pending = self.strategy.accumulation - 1
        loss, _ = self.micro_step(loss_fn, batch)
        return float(loss)

    def state_step(self) -> None:
        """The optimizer's state created without a forward pass, for a probe that measures memory only (the
        estimate's): each trained weight's gradient made by the backward of its own sum (a tensor of the weight's
        shape and type, as a step's backward makes it), then the optimizer step, the zeroing and the model source's
        after-step, as a step ends. The step after it holds what a later step holds (the weights, the zeroed
        gradients, the state); this peaks no higher than a step's own optimizer step. One rank only: data parallel's
        reducer expects one backward over the whole model."""
        for parameter in self.model.parameters():
            if not parameter.stop_gradient:
                parameter.sum().backward()
        self._optimizer_step()

    def train_step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> float:
        """One optimizer step over `accumulation` micro-batches (the same batch); mean loss."""
        total = 0.0
        for _ in range(self.strategy.accumulation):
            loss, _ = self.micro_step(loss_fn, batch)
            total += float(loss)
        return total / self.strategy.accumulation


def make_optimizer(name: str, learning_rate: float, parameters, max_grad_norm: float | None = None
                   ) -> paddle.optimizer.Optimizer:
    """The optimizer, clipping gradients by their global norm where asked (Paddle 2.6's clip makes new gradient
    tensors, 3.x scales them in place: the probe measures whichever the installed Paddle does)."""
    clip = paddle.nn.ClipGradByGlobalNorm(max_grad_norm) if max_grad_norm else None
    return getattr(paddle.optimizer, OPTIMIZERS[name])(learning_rate=learning_rate, parameters=parameters,
                                                       grad_clip=clip)


def inner_optimizer(optimizer: Any) -> Any:
    """The optimizer that holds the state, inside fleet's wrappers (sharding stage 1: `_inner_opt`; group_sharded
    stage 2: `_optim`)."""
    while (inner := getattr(optimizer, "_inner_opt", None) or getattr(optimizer, "_optim", None)) is not None:
        optimizer = inner
    return optimizer


def optimizer_state_ready(name: str, optimizer: paddle.optimizer.Optimizer) -> bool:
    """Whether the optimizer's per-parameter state (Adam's moments, momentum's velocity) exists yet.

    GradScaler skips optimizer.step() while it finds inf gradients (often in fp16's first steps); measuring
    before the state exists would miss its bytes (8 per parameter for AdamW)."""
    if name in STATELESS:
        return True
    return any(len(slots) for slots in getattr(inner_optimizer(optimizer), "_accumulators", {}).values())


def held(tensor: Any) -> int:
    """The bytes a tensor holds now, read from its metadata: 0 for none, or for one released (sharding stage 3 clears
    the weights a rank does not own, whose numel() then raises; stage 2 releases the gradients it does not own)."""
    if tensor is None or not tensor._is_initialized():
        return 0
    return int(tensor._numel()) * tensor.element_size()


def state_counts(model: paddle.nn.Layer, optimizer: Any) -> dict[str, int]:
    """Bytes this rank holds of the weights (with sharding stage 3's slice, `fw_storage`), their gradients (alive from
    backward on, kept zeroed between steps; the fp32 `main_grad` under amp_master_grad; stage 3's slice,
    `bw_storage`) and its optimizer state (Adam's moments, momentum's velocity, O2's master weights)."""
    inner = inner_optimizer(optimizer)
    accumulators = getattr(inner, "_accumulators", {})
    master_weights = getattr(inner, "_master_weights", {})  # O2: fp32 copies of the half weights

    def gradient(parameter: Any) -> int:
        main = getattr(parameter, "main_grad", None)
        grad = main if main is not None else parameter._grad_ivar()
        return held(grad) + held(getattr(parameter, "bw_storage", None))

    return {"weight_bytes": sum(held(p) + held(getattr(p, "fw_storage", None)) for p in model.parameters()),
            "gradient_bytes": sum(gradient(p) for p in model.parameters() if not p.stop_gradient),
            "optimizer_bytes": sum(held(t) for slots in accumulators.values() for t in slots.values())
            + sum(held(t) for t in master_weights.values())}
