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
from vramtune.render.words import best_words, chosen_lines, measured_lines

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


def render_measure(result: ProbeResult, verbose: bool = False) -> None:
    used = result.used_bytes
    console.print(f"{escape(result.strategy.label())}: {_status(result.status)}")
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


STATE_WORDS = {"weights": "weights", "gradients": "gradients", "optimizer_state": "optimizer state",
               "ema": "EMA and the copies kept (counted)"}


def estimate_facts(counts: Any) -> dict[str, Any]:
    """The mechanisms' facts about the model as the estimate counted them (estimating.model.Counts)."""
    return {key: value for mechanism in MECHANISMS for key, value in mechanism.counted_facts(counts).items()}


def strategy_cells(strategy: Strategy, facts: dict[str, Any]) -> list[tuple[str, str]]:
    """The estimate table's strategy columns, (heading, cell), each mechanism's in registry order."""
    cells = (mechanism.column(strategy, facts) for mechanism in MECHANISMS)
    return [cell for cell in cells if cell]


def add_strategy_columns(table: Table, strategy: Strategy, facts: dict[str, Any]) -> None:
    """Numbers (and "-" for none) to the right, words to the left."""
    for heading, cell in strategy_cells(strategy, facts):
        table.add_column(heading, justify="right" if cell == "-" or cell[:1].isdigit() else "left")


def add_peak_rows(table: Table, rows: list[Any], facts: dict[str, Any], *first: str) -> None:
    """Per strategy but its micro-batch (in the rows' order): the largest micro-batch predicted to fit and the next one
    up, over, with their peaks; `first` cells before each row's."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault(tuple(cell for _, cell in strategy_cells(row.strategy, facts)), []).append(row)
    for cells, grouped in groups.items():
        grouped = sorted(grouped, key=lambda r: r.strategy.micro_batch)
        fitting = [r for r in grouped if r.fits]
        over = [r for r in grouped if not r.fits and (not fitting or r.strategy.micro_batch
                                                      > fitting[-1].strategy.micro_batch)]
        largest, above = (fitting[-1] if fitting else None), (over[0] if over else None)
        table.add_row(*first, *cells, f"m={largest.strategy.micro_batch}" if largest else "none",
                      format_bytes(largest.reserved) if largest else "-",
                      f"m={above.strategy.micro_batch}" if above else "-",
                      format_bytes(above.reserved) if above else "-")


def fills(row: Any) -> str:
    """What fills a predicted peak: the counted state by part, the activations, the allocator's reserve."""
    named = {**STATE_WORDS, **{part: words for mechanism in MECHANISMS
                               for part, words in mechanism.state_parts.items()}}
    parts = {**{named[part]: size for part, size in row.state.items()}, "activations": row.activations,
             "allocator reserve": row.allocator}
    return "  what fills it: " + ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items() if size)


def preferences() -> str:
    """The estimate's preferences in words, in their order (speed is not estimated)."""
    said = sorted(mechanism.preferred for mechanism in MECHANISMS if mechanism.preferred)
    return "; ".join(words for _, words in said)


def render_estimate(estimate: Any) -> None:
    """Per strategy: the largest micro-batch predicted to fit (and the next one up, over), then the predicted best and
    what fills its peak."""
    limit, facts = estimate.budget.limit, estimate_facts(estimate.counts)
    table = Table(title=f"predicted per-rank peaks within {format_bytes(limit)} ({estimate.devices} rank"
                        f"{'s' if estimate.devices > 1 else ''}; {estimate.depth_probed} probed on CPU)",
                  title_justify="left")
    if estimate.rows:
        add_strategy_columns(table, estimate.rows[0].strategy, facts)
    for column in ("largest fitting", "its peak", "next up", "its peak"):
        table.add_column(column, justify="right")
    add_peak_rows(table, estimate.rows, facts)
    console.print(table)
    for note in estimate.notes:
        say(f"note: {note}")
    best = estimate.best
    if best is None:
        console.print(f"[bold red]nothing is predicted to fit[/] {format_bytes(limit)}")
    else:
        console.print(f"[bold green]predicted best[/]: {escape(best_words(best.strategy, facts))}; peak "
                      f"{format_bytes(best.reserved)} of {format_bytes(limit)}")
        say(fills(best))
        say(f"  (the best by vramtune's preferences: {preferences()}. Speed is not estimated: `vramtune probe` on the "
            "card measures it)")
    say(f"{estimate.probes} CPU probes and a parameter count in {estimate.seconds:.1f}s")
