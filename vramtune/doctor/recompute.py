"""Recompute: vramtune's wrapper (child/blocks.py) lowers a small transformer's peak, each peak in a fresh process."""
from __future__ import annotations

from typing import Any

from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict, failed_run
from vramtune.records import Device
from vramtune.units import format_bytes


class Recompute(Check):
    name = "recompute"
    title = "recompute lowers the peak"

    def parts(self, device: Device) -> tuple[str, ...]:
        return ("plain", "wrapper")

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        from vramtune.doctor.workload import LAYERS, step_peak, transformer

        return step_peak(device, transformer(), recompute_blocks=LAYERS if part == "wrapper" else 0)

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        failed = failed_run(runs)
        if failed:
            return failed
        plain, wrapped = runs["plain"].figures, runs["wrapper"].figures
        saved = plain["activations"] - wrapped["activations"]
        figure = (f"vramtune's wrapper on every block: activations {format_bytes(wrapped['activations'])} instead of "
                  f"{format_bytes(plain['activations'])} ({saved / plain['activations']:.0%} saved)")
        if saved <= 0:
            return Verdict(FAIL, figure, "recomputing blocks saves no memory here: vramtune's recompute rungs would "
                                         "cost time for nothing, and its memory model would predict savings that "
                                         "are not there")
        return Verdict(PASS, figure)


CHECK = Recompute()
