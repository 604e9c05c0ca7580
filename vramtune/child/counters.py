"""Paddle's allocator peak counters, on Paddle 2.6 and 3.x, CPU and GPU.

Imported only in probe children: touching CUDA in the parent would hold memory on the card the probes measure.
"""
from __future__ import annotations

import paddle
from paddle.base import core

_cuda = paddle.device.cuda


class MemoryCounters:
    """Peak allocator memory of one device: allocated bytes (CPU and GPU) and reserved bytes (GPU only).

    The counters are read, and reset, by feature detection rather than by version number: Paddle 2.6 has the peak
    counters (`paddle.device.cuda.max_memory_allocated/reserved`, `core.host_memory_stat_peak_value`) but no way
    to reset them; 3.x adds `paddle.device.cuda.reset_max_memory_allocated/reserved` and
    `core.host_memory_stat_reset_peak_value`. Without a reset, `peak()` is the peak since the process started.
    A probe child is a fresh process whose warmup runs a micro-batch of its measured steps' shape (a step's last
    one and the optimizer step: `StepRunner.warmup_step`), so nothing before the measured steps is bigger than them
    and the peak since start equals the measured peak (a first step peaks lower if anything: its gradients are
    created, not accumulated beside zeroed ones). A one-off allocation
    before start() would make the 2.6 peak too high, never too low.
    On CPU Paddle's host "Reserved" counter only mirrors "Allocated" (there is no pool), so it is not reported.
    """

    def __init__(self, kind: str, index: int):
        """kind is 'cpu' or 'gpu'; index is the GPU ordinal (Paddle keeps one host counter, so CPU ignores it)."""
        if kind not in ("cpu", "gpu"):
            raise ValueError(f"kind must be 'cpu' or 'gpu', not {kind!r}")
        self.kind = kind
        self.index = index if kind == "gpu" else 0

    @property
    def resets(self) -> bool:
        """Whether start() really resets the peaks; if not, peak() counts from process start."""
        if self.kind == "gpu":
            return hasattr(_cuda, "reset_max_memory_allocated") and hasattr(_cuda, "reset_max_memory_reserved")
        return hasattr(core, "host_memory_stat_reset_peak_value")

    def synchronize(self) -> None:
        """Wait for this device's queued work. `paddle.device.synchronize` with the device's own name: the deprecated
        `paddle.device.cuda.synchronize(index)` makes GPU `index` current in the calling process (a CUDA context
        there, outside every counter, for a rank on another GPU), and `paddle.device.synchronize` refuses an int."""
        paddle.device.synchronize(f"gpu:{self.index}")

    def start(self) -> None:
        """Call right before the measured steps: peaks restart from the memory in use now, where Paddle can."""
        if not self.resets:
            return
        if self.kind == "gpu":
            self.synchronize()  # queued work first, so the reset sees what is really in use
            _cuda.reset_max_memory_allocated(self.index)
            _cuda.reset_max_memory_reserved(self.index)
        else:
            core.host_memory_stat_reset_peak_value("Allocated", self.index)

    def reserved_now(self) -> int | None:
        """What the GPU's allocator holds right now (None on CPU): at an out-of-memory, how far the probe got."""
        return int(_cuda.memory_reserved(self.index)) if self.kind == "gpu" else None

    def peak(self) -> tuple[int, int | None]:
        """(peak allocated bytes, peak reserved bytes or None on CPU) since start(), or since process start."""
        if self.kind == "gpu":
            self.synchronize()
            return int(_cuda.max_memory_allocated(self.index)), int(_cuda.max_memory_reserved(self.index))
        return int(core.host_memory_stat_peak_value("Allocated", self.index)), None
