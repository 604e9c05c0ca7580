"""A tuning run for people (`vramtune probe`, `apply`): each probe as it finishes, the table of probes, the chart, the
one-line answer and what fills the chosen peak."""
from __future__ import annotations

import contextlib
import sys
import time

from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from vramtune.core.records import ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes, format_setting, format_share
from vramtune.render.chart import text_chart
from vramtune.render.output import console, say, styled_status
from vramtune.render.results import phase_line
from vramtune.render.words import best_words, chosen_lines


def _throughput(value: float | None) -> str:
    return f"{value:.1f}/s" if value else "-"


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
        console.print(f"  [{self.count:>2}] {rung:<12} {strategy.label():<28} {styled_status(result.status):<22} "
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


def probe_table(probes: list[ProbeResult], limit: float) -> Table:
    """One row per probe; the strategy in one column (its label, recompute as r/total) so it fits 80 columns."""
    table = Table(title="probes", title_justify="left", show_lines=False)
    for column in ("#", "rung", "strategy", "status", "peak", "of limit", "samples/s", "note"):
        table.add_column(column, justify="right" if column in ("#", "peak", "of limit", "samples/s") else "left",
                         no_wrap=column != "note")
    for index, result in enumerate(probes, 1):
        used = result.used_bytes
        note = "" if result.measured else escape((result.error or "")[:60])
        table.add_row(str(index), escape(result.rung or "-"), escape(result.label()), styled_status(result.status),
                      format_bytes(used), format_share(used, limit) if used else "-",
                      _throughput(result.samples_per_sec), note)
    return table


def choice_line(report: Report) -> str:
    """The one-line answer (plain text): what was chosen, or that nothing fits."""
    chosen, limit, budget = report.chosen, report.limit, report.budget
    headroom = f"budget {format_bytes(budget.bytes)} less {format_setting(budget.headroom)} headroom"
    if chosen:
        used = chosen.used_bytes
        return (f"chosen: {best_words(chosen.strategy, chosen.facts, report.target_batch)}; peak {format_bytes(used)} "
                f"of {format_bytes(limit)} ({format_share(used, limit)}; {headroom}), "
                f"{chosen.samples_per_sec:.1f} samples/s")
    return f"nothing fits {format_bytes(limit)} ({headroom}) at target batch {report.target_batch}."


def render_breakdown(chosen: ProbeResult) -> None:
    parts = chosen.breakdown()
    if parts:
        say("  what fills its peak: " + ", ".join(f"{name.replace('_', ' ')} {format_bytes(size)}"
                                                  for name, size in parts.items()))
    for line in chosen_lines(chosen):
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
