"""Rendering for people (rich, on stderr) and machines (JSON, on stdout). No decisions are made here."""
from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from vramtune.core.records import ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes, format_setting, format_share
from vramtune.plugins import MECHANISMS
from vramtune.render.chart import text_chart

console = Console(stderr=True, highlight=False, soft_wrap=True)
if not console.is_terminal:  # logs and CI: wide enough for the probe table
    console.width = 140
STATUS_STYLE = {"fits": "green", "over_budget": "yellow", "oom": "red", "crashed": "red", "timeout": "red",
                "unstable": "magenta", "unsupported": "dim"}


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=1, default=str) + "\n")
    sys.stdout.flush()


def say(message: str) -> None:
    """A plain line for people, on stderr (never read as markup)."""
    console.print(message, markup=False)


def error(message: str) -> None:
    """One problem on stderr: in colour on a terminal, plain text elsewhere (logs, CI, tests)."""
    if console.is_terminal:
        console.print(f"[bold red]error:[/] {escape(message)}")
    else:
        print(f"error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    if console.is_terminal:
        console.print(f"[bold yellow]warning:[/] {escape(message)}")
    else:
        print(f"warning: {message}", file=sys.stderr)


def _throughput(value: float | None) -> str:
    return f"{value:.1f}/s" if value else "-"


def _status(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


class ProbeProgress:
    """One line per probe as it finishes, with the rung, the strategy and the elapsed time; on an interactive
    console also a live spinner for the running probe."""

    def __init__(self, verbose: bool = False) -> None:
        self.start = time.monotonic()
        self.count = 0
        self.live: Progress | None = None
        self.verbose = verbose

    def __call__(self, rung: str, strategy: Strategy, result: ProbeResult | None) -> None:
        elapsed = time.monotonic() - self.start
        if result is None:
            self.count += 1
            if console.is_interactive and sys.stderr.isatty():  # not in CI logs, even under FORCE_COLOR
                self.live = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=console, transient=True)
                self.live.add_task(escape(f"[{self.count}] {rung}: probing {strategy.label()} "
                                          f"(tuning for {elapsed:.0f}s)"))
                self.live.start()
            return
        self.close()
        used = result.used_bytes
        reused = " (saved)" if result.reused else ""
        detail = format_bytes(used) if used else escape((result.error or "")[:90])
        console.print(f"  [{self.count:>2}] {rung:<12} {strategy.label():<28} {_status(result.status):<22} "
                      f"{detail:<12} {_throughput(result.samples_per_sec):>9}  {elapsed:5.1f}s{reused}")
        if self.verbose and not result.reused and result.phases is not None:
            say(f"       {phase_line(result)}")

    def close(self) -> None:
        """Stop the live line and show the cursor again; safe to call twice, and after a Ctrl-C that interrupted
        a stop half-way (rich then has nothing left to pop)."""
        live, self.live = self.live, None
        if live is not None:
            with contextlib.suppress(IndexError):
                live.stop()
            console.show_cursor(True)


def phase_line(result: ProbeResult) -> str:
    """Where a probe's wall time went: the child's phases, and the rest (starting the process, its exit)."""
    phases = result.phases or {}
    rest = result.seconds - sum(phases.values())
    return "  ".join([*(f"{name} {seconds:.2f}s" for name, seconds in phases.items()), f"rest {rest:.2f}s"])


def probe_table(probes: list[ProbeResult], limit: float) -> Table:
    """One row per probe; the strategy in one column (its label, recompute as r/total) so it fits 80 columns."""
    table = Table(title="probes", title_justify="left", show_lines=False)
    for column in ("#", "rung", "strategy", "status", "peak", "of limit", "samples/s", "note"):
        table.add_column(column, justify="right" if column in ("#", "peak", "of limit", "samples/s") else "left",
                         no_wrap=column != "note")
    for index, result in enumerate(probes, 1):
        used = result.used_bytes
        note = "" if result.measured else escape((result.error or "")[:60])
        table.add_row(str(index), escape(result.rung or "-"), escape(result.label()), _status(result.status),
                      format_bytes(used), format_share(used, limit) if used else "-",
                      _throughput(result.samples_per_sec), note)
    return table


def choice_line(report: Report) -> str:
    """The one-line answer (plain text): what was chosen, or that nothing fits."""
    chosen, limit, budget = report.chosen, report.limit, report.budget
    headroom = f"budget {format_bytes(budget.bytes)} less {format_setting(budget.headroom)} headroom"
    if chosen:
        used = chosen.used_bytes
        words: dict[str, list[str]] = {"what": [], "batch": [], "memory": []}
        for mechanism in MECHANISMS:
            if said := mechanism.phrase(chosen.strategy, chosen.facts):
                words[said[0]].append(said[1])
        batch = " x ".join(words["batch"]) + f" = {report.target_batch}"
        return (f"chosen: {', '.join([*words['what'], batch, *words['memory']])}; peak {format_bytes(used)} of "
                f"{format_bytes(limit)} ({format_share(used, limit)}; {headroom}), "
                f"{chosen.samples_per_sec:.1f} samples/s")
    return f"nothing fits {format_bytes(limit)} ({headroom}) at target batch {report.target_batch}."


def render_breakdown(chosen: ProbeResult) -> None:
    parts = chosen.breakdown()
    if parts:
        say("  what fills its peak: " + ", ".join(f"{name.replace('_', ' ')} {format_bytes(size)}"
                                                  for name, size in parts.items()))
    for mechanism in MECHANISMS:
        for line in mechanism.describe(chosen):
            say(f"  {line}")


def render_tuning(report: Report) -> None:
    limit = report.limit
    console.print(probe_table(report.probes, limit))
    for line in text_chart(report.probes, limit, report.chosen, width=max(16, min(48, console.width - 42))):
        console.print(line)
    for note in report.notes:
        say(f"note: {note}")
    if report.reused:
        say(f"reused {report.reused} saved probe(s) (--fresh re-probes)")
    if report.interrupted:
        console.print(f"[yellow]interrupted[/] after {len(report.probes)} probe(s): finished probes are saved; run "
                      "again to resume")
        if report.chosen:
            say(f"best so far: {choice_line(report).removeprefix('chosen: ')}")
    elif report.chosen:
        console.print(f"[bold green]chosen[/]: {escape(choice_line(report).removeprefix('chosen: '))}")
        render_breakdown(report.chosen)
    else:
        console.print(f"[bold red]nothing fits[/] {escape(choice_line(report).removeprefix('nothing fits '))}")
        closest = report.closest
        if closest:
            used = closest.used_bytes
            say(f"closest: {closest.strategy.label()} peaked at {format_bytes(used)}, "
                f"{format_bytes(used - limit)} over ({format_share(used, limit)} of the limit)")
        for tip in report.suggestions:
            say(f"  would fit with: {tip}")
    count = len(report.probes)
    say(f"{count} probe{'' if count == 1 else 's'} in {report.seconds:.1f}s on {report.device_name}")


def render_measure(result: ProbeResult, verbose: bool = False) -> None:
    used = result.used_bytes
    console.print(f"{escape(result.strategy.label())}: {_status(result.status)}")
    if used:
        say(f"  peak {format_bytes(result.peak_bytes)} allocated"
            + (f", {format_bytes(result.reserved_bytes)} reserved" if result.reserved_bytes else "")
            + f" (budget {format_bytes(result.budget_bytes)})")
        say(f"  {result.step_seconds:.3f}s per optimizer step, {result.samples_per_sec:.1f} "
            f"samples/s, loss {result.loss}")
    for mechanism in MECHANISMS:
        for line in mechanism.measured_lines(result.facts):
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


def best_words(strategy: Strategy, facts: dict[str, Any]) -> str:
    """A predicted best in every mechanism's words (as in the one-line answer)."""
    words: dict[str, list[str]] = {"what": [], "batch": [], "memory": []}
    for mechanism in MECHANISMS:
        if said := mechanism.phrase(strategy, facts):
            words[said[0]].append(said[1])
    return ", ".join([*words["what"], " x ".join(words["batch"]), *words["memory"]])
