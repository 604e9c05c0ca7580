"""Child-side helpers the checks share (they import Paddle: call them only from a check's `measure`): the device,
the allocator's counters, and a small transformer's training step with its peak."""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import paddle
from paddle.base import core

from vramtune.child.counters import MemoryCounters
from vramtune.records import Device

WIDTH, HEADS, LAYERS, SEQ, BATCH = 256, 4, 2, 128, 8  # ~1.6M parameters; activations ~100 MiB in fp32


def use(device: Device) -> MemoryCounters:
    paddle.set_device(device.paddle_device)
    return MemoryCounters(device.kind, device.index)


def allocated_now(device: Device) -> int:
    """Bytes allocated right now (the counters' current value, not their peak)."""
    if device.kind == "gpu":
        paddle.device.cuda.synchronize(device.index)
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


def step_peak(device: Device, model: paddle.nn.Layer, precision: str = "fp32", level: str = "O0",
              loss: Callable[[paddle.nn.Layer], paddle.Tensor] = transformer_loss) -> dict[str, Any]:
    """One warmup step (the optimizer's state then exists), then one measured step: its allocated (and on a GPU
    reserved) peak, and `base`, what was allocated before it (weights, gradients, optimizer state)."""
    counters = use(device)
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-4, parameters=model.parameters())
    dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(precision, "float32")
    if level == "O2":
        model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2", dtype=dtype)
    scaler = paddle.amp.GradScaler(init_loss_scaling=1024) if precision == "fp16" and device.kind == "gpu" else None

    def train() -> None:
        amp = paddle.amp.auto_cast(level=level, dtype=dtype) if level != "O0" else contextlib.nullcontext()
        with amp:
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
