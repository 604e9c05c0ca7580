"""The estimate's table for people (stderr), for a spec's estimate and a config.json's answer alike: per strategy but
its micro-batch, the largest micro-batch predicted to fit and the next one up; the predicted best and what fills it."""
from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from vramtune.core.strategy import Facts, Strategy
from vramtune.core.units import format_bytes
from vramtune.estimating.rows import PREFERENCES, counted_facts
from vramtune.estimating.spec_estimate import Estimate
from vramtune.memory.state import Row
from vramtune.render.output import console, say
from vramtune.render.words import best_words

STATE_WORDS = {"weights": "weights", "gradients": "gradients", "optimizer_state": "optimizer state",
               "amp_copies": "AMP O1 weight copies", "buffers": "data-parallel buffers",
               "ema": "EMA and the copies kept (counted)"}  # the counted state's parts (memory.state.state)


def strategy_cells(strategy: Strategy, facts: Facts) -> list[tuple[str, str]]:
    """The estimate table's strategy columns, (heading, cell): the precision, the layers recomputed of the counted
    blocks, the sharding stage."""
    blocks = strategy.recomputed_blocks
    return [("precision", strategy.precision),
            ("recompute", f"{blocks}/{facts.get('total_blocks') or 0}" if blocks else "-"),
            ("stage", str(strategy.sharding_stage))]


def add_strategy_columns(table: Table, strategy: Strategy, facts: Facts) -> None:
    """Numbers (and "-" for none) to the right, words to the left."""
    for heading, cell in strategy_cells(strategy, facts):
        table.add_column(heading, justify="right" if cell == "-" or cell[:1].isdigit() else "left")


def add_peak_rows(table: Table, rows: list[Row], facts: Facts, *first: str) -> None:
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


def fills(row: Row) -> str:
    """What fills a predicted peak: the counted state by part, the activations, the allocator's reserve."""
    parts = {**{STATE_WORDS[part]: size for part, size in row.state.items()}, "activations": row.activations,
             "allocator reserve": row.allocator}
    return "  what fills it: " + ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items() if size)


def preferences() -> str:
    """The estimate's preferences in words, in their order (speed is not estimated)."""
    return "; ".join(PREFERENCES)


def render_estimate(estimate: Estimate) -> None:
    """Per strategy: the largest micro-batch predicted to fit (and the next one up, over), then the predicted best and
    what fills its peak."""
    limit, facts = estimate.budget.limit, counted_facts(estimate.counts)
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
