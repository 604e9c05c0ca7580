"""One measured result (`vramtune measure`) and check's verdict (`vramtune check`), for people."""
from __future__ import annotations

from typing import Any

from rich.markup import escape

from vramtune.core.records import ProbeResult
from vramtune.core.units import format_bytes
from vramtune.render.output import console, error, say, styled_status
from vramtune.render.words import measured_lines


def phase_line(result: ProbeResult) -> str:
    """Where a probe's wall time went: the child's phases, and the rest (starting the process, its exit)."""
    phases = result.phases or {}
    rest = result.seconds - sum(phases.values())
    return "  ".join([*(f"{name} {seconds:.2f}s" for name, seconds in phases.items()), f"rest {rest:.2f}s"])


def render_measure(result: ProbeResult, verbose: bool = False) -> None:
    used = result.used_bytes
    console.print(f"{escape(result.strategy.label())}: {styled_status(result.status)}")
    if used:
        say(f"  peak {format_bytes(result.peak_bytes)} allocated"
            + (f", {format_bytes(result.reserved_bytes)} reserved" if result.reserved_bytes else "")
            + f" (budget {format_bytes(result.budget_bytes)})")
        say(f"  {result.step_seconds:.3f}s per optimizer step, {result.samples_per_sec:.1f} "
            f"samples/s, loss {result.loss}")
    for line in measured_lines(result.facts):
        say(f"  {line}")
    if result.error:
        say(f"  {result.error}")
    if result.device:
        say(f"  on {result.device['name']}, paddle {result.paddle_version}")
    if verbose and result.phases is not None:
        say(f"  {phase_line(result)}")


def render_check(verdict: dict[str, Any]) -> None:
    for note in verdict["notes"]:
        say(f"note: {note}")
    if verdict["measured"]:
        render_measure(ProbeResult.from_json(verdict["measured"]))
    for reason in verdict["reasons"]:
        error(reason)
    status = verdict["status"]
    style = {"pass": "green", "smoke": "green", "fail": "red"}[status]
    console.print(f"check: [bold {style}]{status}[/]")
