"""The config.json estimate for people (stderr): per fine-tuning, precision, recompute and sharding stage, the largest
micro-batch predicted to fit and the next one up; then each fine-tuning's predicted best and what fills it."""
from __future__ import annotations

from rich.table import Table

from vramtune.core.units import format_bytes
from vramtune.dialects.roundtrip import value_text
from vramtune.estimating.answer import FINE_TUNINGS, Answer, file_keys
from vramtune.estimating.rows import counted_facts
from vramtune.render.estimate import add_peak_rows, add_strategy_columns, fills, preferences
from vramtune.render.layouts import render_layouts
from vramtune.render.output import console, say
from vramtune.render.words import best_words


def headline(answer: Answer) -> str:
    q, arch, lora = answer.question, answer.arch, answer.counts["LoRA"]
    moe = (f", {arch.moe.experts} experts ({arch.moe.top_k} active; {answer.active:,} parameters per token)"
           if arch.moe else "")
    return (f"estimating {q.name} ({arch.model_type}, {arch.layers} layers{moe}): "
            f"{answer.counts['full'].params:,} parameters counted from config.json, LoRA r={q.lora_rank} trains "
            f"{lora.trainable:,}; seq {q.seq_len}, {q.batch} samples per step and device, {q.attention} attention"
            + (f", {q.devices} devices" if q.devices > 1 else "") + "; nothing built, no probe")


def _best_line(answer: Answer, fine_tuning: str) -> str:
    best = answer.best(fine_tuning)
    asked = " (asked)" if answer.question.fine_tuning == fine_tuning else ""
    if best is None:
        return f"{fine_tuning}{asked}: nothing is predicted to fit {format_bytes(answer.budget.limit)}"
    facts = counted_facts(answer.counts[fine_tuning])
    return (f"{fine_tuning}{asked}: {best_words(best.strategy, facts)}; peak {format_bytes(best.reserved)} of "
            f"{format_bytes(answer.budget.limit)}")


def render_answer(answer: Answer) -> None:
    say(headline(answer))
    table = Table(title=f"predicted per-rank peaks within {format_bytes(answer.budget.limit)}", title_justify="left")
    facts = counted_facts(answer.counts["full"])
    table.add_column("fine-tuning", justify="left")
    add_strategy_columns(table, answer.rows["full"][0].strategy, facts)
    for column in ("largest fitting", "its peak", "next up", "its peak"):
        table.add_column(column, justify="right")
    for fine_tuning in FINE_TUNINGS:
        add_peak_rows(table, answer.rows[fine_tuning], facts, fine_tuning)
    console.print(table)
    for note in answer.notes:
        say(f"note: {note}")
    for fine_tuning in FINE_TUNINGS:
        say("predicted best, " + _best_line(answer, fine_tuning))
        if best := answer.best(fine_tuning):
            say(fills(best))
            keys = file_keys(best, fine_tuning, answer.counts[fine_tuning], answer.arch)
            said = ", ".join(f"{key}: {value_text(value)}" for key, value in keys.items())
            say(f"  in the PaddleFormers config: {said}")
    say(f"(the best by preference: {preferences()}. Speed is not estimated)")
    if answer.layouts:
        render_layouts(answer.layouts, answer.budget)
    say(f"answered in {answer.seconds:.2f}s")
