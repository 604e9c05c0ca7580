"""Child-side helpers the checks share (they import Paddle: call them only from a check's `measure`): the device,
the allocator's counters, and a small transformer's training step with its peak."""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import paddle
from paddle.base import core

from vramtune.child.counters import MemoryCounters
from vramtune.child.rank import device_ordinal
from vramtune.core.records import Device

WIDTH, HEADS, LAYERS, SEQ, BATCH = 256, 4, 2, 128, 8  # ~1.6M parameters; activations ~100 MiB in fp32


def use(device: Device) -> MemoryCounters:
    paddle.set_device(device.paddle_device)
    return MemoryCounters(device.kind, device.index)


def on_this_rank(device: Device) -> Device:
    """The GPU this rank measures on, under `paddle.distributed.launch`: the one the launcher selected for it."""
    return Device.from_json({**device.to_json(), "index": device_ordinal(device.index)})


def allocated_now(device: Device) -> int:
    """Bytes allocated right now (the counters' current value, not their peak)."""
    if device.kind == "gpu":
        paddle.device.synchronize(device.paddle_device)
        return int(paddle.device.cuda.memory_allocated(device.index))
    return int(core.host_memory_stat_current_value("Allocated", 0))


def transformer() -> paddle.nn.Layer:
    layer = paddle.nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0)
    return paddle.nn.Sequential(paddle.nn.Linear(WIDTH, WIDTH), paddle.nn.TransformerEncoder(layer, LAYERS),
                                paddle.nn.Linear(WIDTH, 1))


def matmul_parameters(model: paddle.nn.Layer) -> int:
    """Parameters of the matmul weights (AMP O1 keeps a half copy of each for backward)."""
    return sum(int(p.size) for layer in model.sublayers() if isinstance(layer, paddle.nn.Linear)
               for p in [layer.weight])


def transformer_loss(model: paddle.nn.Layer) -> paddle.Tensor:
    return model(paddle.randn([BATCH, SEQ, WIDTH])).astype("float32").mean()


def step_peak(device: Device, model: paddle.nn.Layer,
              loss: Callable[[paddle.nn.Layer], paddle.Tensor] = transformer_loss, *,
              prepare: Callable[[Any, Any], tuple[Any, Any]] | None = None,
              forward: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
              make_scaler: Callable[[], Any] | None = None) -> dict[str, Any]:
    """One warmup step (the optimizer's state then exists), then one measured step: its allocated (and on a GPU
    reserved) peak, and `base`, what was allocated before it (weights, gradients, optimizer state). A mechanism's
    check changes the step as its probes do: `prepare` wraps model and optimizer once the optimizer exists,
    `forward` is the context each forward runs in, `make_scaler` the loss scaler."""
    counters = use(device)
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-4, parameters=model.parameters())
    if prepare:
        model, optimizer = prepare(model, optimizer)
    scaler = make_scaler() if make_scaler else None

    def train() -> None:
        with forward():
            value = loss(model).astype("float32")
        if scaler:
            scaler.scale(value).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            value.backward()
            optimizer.step()
        optimizer.clear_grad()

    train()
    base = allocated_now(device)
    counters.start()
    train()
    peak, reserved = counters.peak()
    return {"base": base, "peak": peak, "reserved": reserved, "activations": peak - base,
            "matmul_parameters": matmul_parameters(model), "resets": counters.resets}
