"""The counters: a known allocation moves the allocated (and on a GPU the reserved) peak by at least its size,
reserved >= allocated, the reset works where Paddle has it (3.x), and where it does not (2.6) a fresh process starts
near zero (a probe's peak then counts from its start)."""
from __future__ import annotations

from typing import Any

from vramtune.core.records import Device
from vramtune.core.units import format_bytes as size_of
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, MiB, Verdict, failed_run

SIZE = 64 * MiB  # the known allocation
NEAR_ZERO = 16 * MiB  # a fresh process's peak before it allocates anything


class Counters(Check):
    name = "counters"
    title = "allocator peak counters"

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        import paddle

        from vramtune.doctor.workload import allocated_now, use

        counters = use(device)
        fresh, _ = counters.peak()  # since the process started: nothing allocated on the device yet
        before = allocated_now(device)
        counters.start()
        tensor = paddle.zeros([SIZE // 4], dtype="float32")
        allocated, reserved = counters.peak()
        del tensor
        after_free = allocated_now(device)
        counters.start()
        after_reset, _ = counters.peak()
        return {"size": SIZE, "before": before, "peak_allocated": allocated, "peak_reserved": reserved,
                "fresh_peak": fresh, "resets": counters.resets, "after_free": after_free,
                "after_reset": after_reset}

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        failed = failed_run(runs)
        if failed:
            return failed
        f = runs[""].figures
        moved = f["peak_allocated"] - f["before"]
        figure = f"a {size_of(f['size'])} tensor moved the allocated peak by {size_of(moved)}"
        if f["peak_reserved"] is not None:
            figure += f", reserved peak {size_of(f['peak_reserved'])}"
        if moved < f["size"]:
            return Verdict(FAIL, figure, "the allocated peak misses allocations: every probe's peak is too low, so "
                                         "configurations reported to fit can run out of memory")
        if f["peak_reserved"] is not None and f["peak_reserved"] < max(f["peak_allocated"], f["size"]):
            return Verdict(FAIL, figure, "the reserved peak is below what was allocated: vramtune judges fit by the "
                                         "reserved peak on a GPU, so its peaks are too low")
        if f["resets"]:
            figure += f"; after freeing it and a reset the peak is {size_of(f['after_reset'])}"
            if f["after_reset"] >= f["before"] + f["size"]:
                return Verdict(FAIL, figure, "the reset does not reset: each probe's peak includes its warmup and "
                                             "model building, so peaks can be too high")
        else:
            figure += (f"; no reset in this Paddle: a fresh process peaks at {size_of(f['fresh_peak'])} "
                       "before allocating")
            if f["fresh_peak"] > NEAR_ZERO:
                return Verdict(FAIL, figure, "without a reset a probe's peak counts from its process start, and "
                                             "this one does not start near zero: peaks can be too high")
        return Verdict(PASS, figure)


CHECK = Counters()
