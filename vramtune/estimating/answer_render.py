"""The config.json estimate for people (stderr): per fine-tuning, precision, recompute and sharding stage, the largest
micro-batch predicted to fit and the next one up; then each fine-tuning's predicted best and what fills it."""
from __future__ import annotations

from rich.table import Table

from vramtune.estimating.answer import FINE_TUNINGS, Answer, file_keys
from vramtune.estimating.model import Row
from vramtune.render import console, say
from vramtune.units import format_bytes


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
    return (f"{fine_tuning}{asked}: {best.precision}, micro-batch {best.micro_batch} x accumulation "
            f"{best.accumulation}" + (f" x {best.devices} devices" if best.devices > 1 else "")
            + f", recompute {best.recomputed_blocks}/{answer.arch.layers}"
            + (f", sharding stage {best.sharding_stage}" if best.sharding_stage else "")
            + f"; peak {format_bytes(best.reserved)} of {format_bytes(answer.budget.limit)}")


def _fills(best: Row) -> str:
    parts = {"weights": best.weights, "gradients": best.gradients, "optimizer state": best.optimizer_state,
             "AMP O1 weight copies": best.amp_copies, "data-parallel buffers": best.buffers,
             "activations": best.activations, "allocator reserve": best.allocator}
    return "  what fills it: " + ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items() if size)


def render_answer(answer: Answer) -> None:
    say(headline(answer))
    table = Table(title=f"predicted per-rank peaks within {format_bytes(answer.budget.limit)}", title_justify="left")
    for column in ("fine-tuning", "precision", "recompute", "stage", "largest fitting", "its peak", "next up",
                   "its peak"):
        table.add_column(column, justify="left" if column in ("fine-tuning", "precision") else "right")
    for fine_tuning in FINE_TUNINGS:
        groups: dict[tuple, list[Row]] = {}
        for r in answer.rows[fine_tuning]:
            groups.setdefault((r.precision, r.recomputed_blocks, r.sharding_stage), []).append(r)
        for (precision, recomputed, stage), rows in groups.items():
            fitting = [r for r in rows if r.fits]
            over = [r for r in rows if not r.fits and (not fitting or r.micro_batch > fitting[-1].micro_batch)]
            largest, above = (fitting[-1] if fitting else None), (over[0] if over else None)
            table.add_row(fine_tuning, precision, f"{recomputed}/{answer.arch.layers}" if recomputed else "-",
                          str(stage), f"m={largest.micro_batch}" if largest else "none",
                          format_bytes(largest.reserved) if largest else "-",
                          f"m={above.micro_batch}" if above else "-", format_bytes(above.reserved) if above else "-")
    console.print(table)
    for note in answer.notes:
        say(f"note: {note}")
    for fine_tuning in FINE_TUNINGS:
        say("predicted best, " + _best_line(answer, fine_tuning))
        if best := answer.best(fine_tuning):
            say(_fills(best))
            keys = file_keys(best, fine_tuning, answer.arch, answer.question)
            say("  in the PaddleFormers config: " + ", ".join(f"{key}: {value}" for key, value in keys.items()))
    say("(the best by preference: AMP O2, then O1, then fp32; the fewest layers recomputed; the largest micro-batch; "
        "the lowest sharding stage. Speed is not estimated)")
    say(f"answered in {answer.seconds:.2f}s")
