"""The hybrid-parallel layouts for people (stderr): the best few predicted to fit with each pipeline stage's
per-rank peak, then the file's own stated layout and the best one, stage by stage, with what fills each."""
from __future__ import annotations

from rich.table import Table

from vramtune.core.records import Budget
from vramtune.core.units import format_bytes
from vramtune.dialects.paddleformers.layout import layout_keys
from vramtune.dialects.roundtrip import value_text
from vramtune.estimating.layouts import NOTES, PREFERENCES, SHOWN, LayoutRow, Layouts, StagePeak
from vramtune.render.estimate import STATE_WORDS
from vramtune.render.output import console, say

PART_WORDS = {**STATE_WORDS, "activations": "activations", "logits": "logits",
              "pipeline": "pipeline buffers", "dispatch": "all-to-all buffers"}
PRUNING = ("tp within a node of at most 8 devices, dividing the hidden size, heads, key/value heads, vocabulary and "
           "sequence; with several nodes pp at most the nodes; pp x vpp divides the "
           "layers; vpp > 1 only with pp > 2; accumulation >= pp; pp > 1 with sharding stage 1 at most; ep divides "
           "the experts and dp x tp, and takes sharded replicas")


def _batch(row: LayoutRow) -> str:
    return f"m={row.layout.micro_batch} x {row.layout.accumulation}"


def _stages(row: LayoutRow) -> str:
    return ", ".join(format_bytes(stage.reserved) for stage in row.stages)


def _fills(stage: StagePeak) -> str:
    parts = {PART_WORDS[part]: size for part, size in stage.parts.items()}
    said = ", ".join(f"{name} {format_bytes(size)}" for name, size in {**parts, "allocator reserve":
                                                                        stage.allocator}.items() if size)
    return f"  stage {stage.index}: {format_bytes(stage.reserved)}: {said}"


def _described(row: LayoutRow, limit: float) -> str:
    recompute = "every layer recomputed" if row.layout.recompute else "no recompute"
    verdict = "fits" if row.fits else "over"
    return (f"{row.layout.label()}, {_batch(row)}, {recompute}: peak {format_bytes(row.reserved)} per rank "
            f"(stage {row.worst.index}) of {format_bytes(limit)}: {verdict}")


def render_layouts(layouts: Layouts, budget: Budget) -> None:
    limit = budget.limit
    nodes = f" on {layouts.nodes} nodes" if layouts.nodes > 1 else ""
    say(f"layouts of {layouts.devices} devices{nodes}, {layouts.fine_tuning} fine-tuning at {layouts.precision} "
        f"(estimated, the tp and pp split as measured on 2 CPU ranks): {layouts.considered:,} considered, "
        f"{layouts.candidates:,} can run the model ({PRUNING}), {len(layouts.fitting):,} predicted to fit "
        f"{format_bytes(limit)} per rank")
    if layouts.fitting:
        table = Table(title=f"the best {min(SHOWN, len(layouts.fitting))} by preference", title_justify="left")
        for column in ("layout", "batch per replica", "recompute", "peak per rank", "per stage"):
            table.add_column(column, justify="left" if column == "layout" else "right")
        for row in layouts.fitting[:SHOWN]:
            table.add_row(row.layout.label(), _batch(row), "every layer" if row.layout.recompute else "-",
                          format_bytes(row.reserved), _stages(row))
        console.print(table)
    if layouts.stated_problems:
        say("the file's layout cannot run the model: " + "; ".join(layouts.stated_problems))
    if layouts.stated:
        say("the file's layout: " + _described(layouts.stated, limit))
        for stage in layouts.stated.stages:
            say(_fills(stage))
    if best := layouts.best:
        say("best layout: " + _described(best, limit))
        for stage in best.stages:
            say(_fills(stage))
        keys = ", ".join(f"{key}: {value_text(value)}" for key, value in layout_keys(best.layout).items())
        say(f"  in the PaddleFormers config: {keys}")
    else:
        say(f"best layout: none of the {layouts.candidates:,} is predicted to fit {format_bytes(limit)}")
    for note in NOTES:
        say(f"note: {note}")
    say(f"(the best layout by preference: {'; '.join(PREFERENCES)}. Speed is not estimated)")
