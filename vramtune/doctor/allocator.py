"""The allocator: FLAGS_allocator_strategy, and on a GPU what it reserves beyond the allocated peak over a small
transformer's step (the reserve `estimate` adds; it calibrates it)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vramtune.core.records import Device
from vramtune.core.units import format_bytes
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict, failed_run

GROWING = "auto_growth"  # Paddle's default: the pool grows with what is allocated
# what Paddle's GPU allocator reads from the environment at import and changes what is measured (every probe inherits
# the user's environment): a saved check holds for the environment it ran under only
ENV = ("FLAGS_allocator_strategy", "FLAGS_use_cuda_malloc_async_allocator", "FLAGS_use_virtual_memory_auto_growth",
       "FLAGS_free_idle_chunk", "FLAGS_fraction_of_gpu_memory_to_use")


def allocator_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allocator's flags set in the environment."""
    return {name: environ[name] for name in ENV if name in environ}


class Allocator(Check):
    name = "allocator"
    title = "the allocator's reserve"
    calibrates = ("the allocator's reserve",)

    def factors(self, figures: dict[str, dict[str, Any]]) -> dict[str, tuple[str, float]]:
        return {"fragmentation": ("the allocator's reserve", reserve(figures[""]))}

    def skip(self, device: Device) -> str | None:
        if device.kind != "gpu":
            return "the CPU allocator keeps no reserve (Paddle's host Reserved counter mirrors Allocated)"
        return None

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        import paddle

        from vramtune.doctor.workload import step_peak, transformer

        strategy = paddle.get_flags(["FLAGS_allocator_strategy"])["FLAGS_allocator_strategy"]
        return {**step_peak(device, transformer()), "strategy": strategy, "env": allocator_env(os.environ)}

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        failed = failed_run(runs)
        if failed:
            return failed
        f = runs[""].figures
        figure = (f"FLAGS_allocator_strategy={f['strategy']}; a step peaking at {format_bytes(f['peak'])} allocated "
                  f"reserved {format_bytes(f['reserved'])} (+{reserve(f):.1%})")
        if f["strategy"] != GROWING:
            return Verdict(FAIL, figure, f"with {f['strategy']} the pool is reserved up front, not grown with the "
                                         "model: every probe's reserved peak is the pool's size; unset "
                                         "FLAGS_allocator_strategy (auto_growth is Paddle's default)")
        return Verdict(PASS, figure)


def reserve(figures: dict[str, Any]) -> float:
    """The measured reserve as a fraction of the allocated peak."""
    return figures["reserved"] / figures["peak"] - 1


CHECK = Allocator()
