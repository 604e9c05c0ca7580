"""Rendering for people (rich, on stderr) and machines (JSON, on stdout). No decisions are made here."""
from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from vramtune.search import used_bytes
from vramtune.strategy import Strategy
from vramtune.units import format_bytes

console = Console(stderr=True, highlight=False, soft_wrap=True)
if not console.is_terminal:  # logs and CI: wide enough for the probe table
    console.width = 140
STATUS_STYLE = {"fits": "green", "over_budget": "yellow", "oom": "red", "crashed": "red", "timeout": "red",
                "unstable": "magenta", "unsupported": "dim"}


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=1, default=str) + "\n")
    sys.stdout.flush()


def error(message: str) -> None:
    """One problem on stderr: in colour on a terminal, plain text elsewhere (logs, CI, tests)."""
    if console.is_terminal:
        console.print(f"[bold red]error:[/] {escape(message)}")
    else:
        print(f"error: {message}", file=sys.stderr)


def _throughput(result: dict[str, Any]) -> str:
    value = result.get("samples_per_sec")
    return f"{value:.1f}/s" if value else "-"


def _status(result: dict[str, Any]) -> str:
    status = result["status"]
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


class ProbeProgress:
    """One line per probe as it finishes, with the rung, the strategy and the elapsed time."""

    def __init__(self, budget_bytes: int, headroom: float):
        self.start = time.monotonic()
        self.count = 0
        self.limit = budget_bytes * (1 - headroom)
        self.status = None

    def __call__(self, rung: str, strategy: Strategy, result: dict[str, Any] | None) -> None:
        elapsed = time.monotonic() - self.start
        if result is None:
            self.count += 1
            if console.is_terminal:  # a live line: spinner, what is being probed, its running time
                self.status = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                       console=console, transient=True)
                self.status.add_task(escape(f"[{self.count}] {rung}: probing {strategy.label()} "
                                            f"(tuning for {elapsed:.0f}s)"))
                self.status.start()
            return
        if self.status is not None:
            self.status.stop()
            self.status = None
        used = used_bytes(result)
        reused = " (saved)" if result.get("reused") else ""
        detail = format_bytes(used) if used else escape((result.get("error") or "")[:90])
        console.print(f"  [{self.count:>2}] {rung:<12} {strategy.label():<28} {_status(result):<22} "
                      f"{detail:<12} {_throughput(result):>9}  {elapsed:5.1f}s{reused}")


def probe_table(probes: list[dict[str, Any]], limit: float) -> Table:
    table = Table(title="probes", title_justify="left", show_lines=False)
    for column in ("#", "rung", "precision", "micro", "accum", "recompute", "status", "peak", "of limit",
                   "samples/s", "note"):
        table.add_column(column, justify="right" if column in ("#", "micro", "accum", "recompute", "peak",
                                                                "of limit", "samples/s") else "left")
    for index, result in enumerate(probes, 1):
        used = used_bytes(result)
        blocks = result.get("recompute_blocks")
        recompute = f"{result['recompute_layers']}/{blocks}" if blocks else str(result["recompute_layers"])
        note = "" if result["status"] in ("fits", "over_budget") else escape((result.get("error") or "")[:60])
        table.add_row(str(index), result.get("rung", "-"), result["precision"], str(result["micro_batch"]),
                      str(result["accumulation"]), recompute, _status(result), format_bytes(used),
                      f"{used / limit:.0%}" if used else "-", _throughput(result), note)
    return table


def render_tuning(report: dict[str, Any]) -> None:
    limit = report["budget_bytes"] * (1 - report["headroom"])
    console.print(probe_table(report["probes"], limit))
    for note in report["notes"]:
        console.print(f"note: {note}", markup=False)
    if report["reused"]:
        console.print(f"reused {report['reused']} saved probe(s) (--fresh re-probes)")
    chosen = report["chosen"]
    if report["interrupted"]:
        console.print("[yellow]interrupted[/]: finished probes are saved; run again to resume")
    if chosen:
        used = chosen["reserved_bytes"] or chosen["peak_bytes"]
        console.print(
            f"[bold green]chosen[/]: {chosen['precision']}, micro-batch {chosen['micro_batch']} x "
            f"accumulation {chosen['accumulation']} = {report['target_batch']}, recompute "
            f"{chosen['recompute_layers']}/{chosen['recompute_blocks'] or 0} blocks; peak {format_bytes(used)} of "
            f"{format_bytes(limit)} ({used / limit:.0%}; budget {format_bytes(report['budget_bytes'])} less "
            f"{report['headroom']:.0%} headroom), {chosen['samples_per_sec']:.1f} samples/s")
    elif not report["interrupted"]:
        console.print(f"[bold red]nothing fits[/] {format_bytes(limit)} (budget {format_bytes(report['budget_bytes'])}"
                      f" less {report['headroom']:.0%} headroom) at target batch {report['target_batch']}.")
        closest = report["closest"]
        if closest:
            used = used_bytes(closest)
            console.print(f"closest: {Strategy.from_json(closest).label()} peaked at {format_bytes(used)}, "
                          f"{format_bytes(used - limit)} over ({used / limit:.0%} of the limit)")
        for tip in report["suggestions"]:
            console.print(f"  would fit with: {tip}")
    console.print(f"{len(report['probes'])} probes in {report['seconds']:.1f}s on {report['device']['name']}")


def render_measure(result: dict[str, Any]) -> None:
    used = used_bytes(result)
    console.print(f"{Strategy.from_json(result).label()}: {_status(result)}")
    if used:
        limit = result["budget_bytes"]
        console.print(f"  peak {format_bytes(result['peak_bytes'])} allocated"
                      + (f", {format_bytes(result['reserved_bytes'])} reserved" if result["reserved_bytes"] else "")
                      + f" (budget {format_bytes(limit)})")
        console.print(f"  {result['step_seconds']:.3f}s per optimizer step, {result['samples_per_sec']:.1f} "
                      f"samples/s, loss {result['loss']}")
    if result.get("recompute_blocks") is not None:
        console.print(f"  repeated blocks found: {result['recompute_blocks']}")
    if result.get("error"):
        console.print(f"  {result['error']}", markup=False)
    console.print(f"  on {result['device']['name']}, paddle {result['paddle_version']}")


def render_check(verdict: dict[str, Any]) -> None:
    for note in verdict["notes"]:
        console.print(f"note: {note}", markup=False)
    render_measure(verdict["measured"])
    for reason in verdict["reasons"]:
        error(reason)
    status = verdict["status"]
    style = {"pass": "green", "smoke": "green", "fail": "red"}[status]
    console.print(f"check: [bold {style}]{status}[/]")
