"""Devices: detection, total memory, and the AMP precisions the device cannot run (`Device.amp_unsupported`).
Imported only in child processes: touching CUDA in the parent would hold memory on the card the
probes measure. The GPU branch follows Paddle's `paddle.device.cuda` API (the same on 2.6 and 3.x); it is verified on
CPU-only machines only as far as the shared code goes."""
from __future__ import annotations

import os
import platform

import paddle

from vramtune.core.gpu import pci_bus_ids
from vramtune.core.records import Device
from vramtune.core.strategy import AMP_DTYPES


class DeviceUnavailable(RuntimeError):
    """The requested device is not there (e.g. a GPU with a CPU-only Paddle build)."""


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return f"cpu ({line.split(':', 1)[1].strip()})"
    except OSError:
        pass
    return f"cpu ({platform.machine()})"


def _gpu_available() -> bool:
    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


CPU_REASON = ("AMP cannot be measured on CPU: Paddle's auto_cast and amp.decorate (O2) have no effect there and "
              "CPU has no fp16/bf16 matmul kernels; tune AMP on the GPU")


def _limits(kind: str, index: int) -> dict[str, str]:
    """The AMP precisions the device cannot measure, and why: none on a CPU (Paddle's AMP is a no-op there), those a
    GPU's Paddle build or compute capability lacks."""
    if kind == "cpu":
        return {dtype: CPU_REASON for dtype in AMP_DTYPES}
    properties = paddle.device.cuda.get_device_properties(index)
    name, place, unsupported = properties.name, f"gpu:{index}", {}
    if not paddle.amp.is_float16_supported(place):
        unsupported["fp16"] = f"{name} has no fp16 AMP support in this Paddle build"
    elif properties.major < 7:  # auto_cast and decorate run fp32 there (paddle.amp, _is_gpu_float16_supported)
        unsupported["fp16"] = f"{name} is below compute capability 7.0, where Paddle's fp16 AMP does nothing"
    if not paddle.amp.is_bfloat16_supported(place):
        unsupported["bf16"] = f"{name} has no bf16 support (needs compute capability 8.0+)"
    return unsupported


def describe(device: str) -> Device:
    """Resolve 'auto' | 'cpu' | 'gpu' | 'gpu:N' to a concrete device and what it can do."""
    version = paddle.__version__
    if device == "cpu" or (device == "auto" and not _gpu_available()):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return Device("cpu", 0, _cpu_name(), total, version, _limits("cpu", 0), os.cpu_count() or 1)
    if not _gpu_available():
        raise DeviceUnavailable(f"this Paddle build sees no GPU (paddle {version}, compiled with CUDA: "
                                f"{paddle.is_compiled_with_cuda()}); install a GPU build (see README) or "
                                "run on CPU with --device cpu --budget SIZE")
    index = int(device.split(":")[1]) if ":" in device else 0
    properties = paddle.device.cuda.get_device_properties(index)
    return Device("gpu", index, properties.name, int(properties.total_memory), version, _limits("gpu", index),
                  paddle.device.cuda.device_count(), pci_bus_ids(), _free_bytes(index))


def _free_bytes(index: int) -> int | None:
    """What GPU `index` has free now for a process of its own (its CUDA context excluded, as a probe's is):
    cudaMemGetInfo through Paddle's gpu_memory_available, which reads the current device (GPU builds only)."""
    from paddle.base import core

    if not hasattr(core, "gpu_memory_available"):
        return None
    paddle.set_device(f"gpu:{index}")
    paddle.zeros([1])  # the device current, its context made
    return int(core.gpu_memory_available())
