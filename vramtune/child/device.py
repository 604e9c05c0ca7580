"""Devices: detection, total memory and AMP support. Imported only in child processes: touching CUDA in the
parent would hold memory on the card the probes measure. The GPU branch follows Paddle's `paddle.device.cuda`
API (the same on 2.6 and 3.x); it is verified on CPU-only machines only as far as the shared code goes."""
from __future__ import annotations

import os
import platform

import paddle

from vramtune.records import Device

CPU_AMP_REASON = ("AMP cannot be measured on CPU: Paddle's auto_cast and amp.decorate (O2) have no effect there "
                  "and CPU has no fp16/bf16 matmul kernels; tune AMP on the GPU")


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


def describe(device: str) -> Device:
    """Resolve 'auto' | 'cpu' | 'gpu' | 'gpu:N' to a concrete device and what it can do."""
    version = paddle.__version__
    if device == "cpu" or (device == "auto" and not _gpu_available()):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return Device("cpu", 0, _cpu_name(), total, version, {p: CPU_AMP_REASON for p in ("fp16", "bf16")},
                      os.cpu_count() or 1)
    if not _gpu_available():
        raise DeviceUnavailable(f"this Paddle build sees no GPU (paddle {version}, compiled with CUDA: "
                                f"{paddle.is_compiled_with_cuda()}); install a GPU build (see README) or "
                                "run on CPU with --device cpu --budget SIZE")
    index = int(device.split(":")[1]) if ":" in device else 0
    properties = paddle.device.cuda.get_device_properties(index)
    place = f"gpu:{index}"
    unsupported = {}
    if not paddle.amp.is_float16_supported(place):
        unsupported["fp16"] = f"{properties.name} has no fp16 AMP support in this Paddle build"
    elif properties.major < 7:  # auto_cast and decorate silently run fp32 there (paddle.amp, _is_gpu_float16_supported)
        unsupported["fp16"] = f"{properties.name} is below compute capability 7.0, where Paddle's fp16 AMP does nothing"
    if not paddle.amp.is_bfloat16_supported(place):
        unsupported["bf16"] = f"{properties.name} has no bf16 support (needs compute capability 8.0+)"
    return Device("gpu", index, properties.name, int(properties.total_memory), version, unsupported,
                  paddle.device.cuda.device_count())
