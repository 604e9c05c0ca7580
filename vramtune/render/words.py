"""What the output says of a strategy and of a result's facts, in words: the one-line answer's strategy (also the
estimate's predicted best), what `vramtune measure` says of the facts, and the lines about a chosen result. They name
Strategy fields and fact keys (core/strategy.py, core/records.py FACTS): the vocabulary every mechanism shares."""
from __future__ import annotations

from typing import Any

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes
from vramtune.mechanisms.evaluation.kept import peak_with_kept


def best_words(strategy: Strategy, facts: dict[str, Any], target_batch: int | None = None) -> str:
    """A strategy as the one-line answer says it: the precision, the batch's factors (joined with " x ", then
    "= the target batch" when given), what saves memory (recompute, sharding; nothing when off). The estimate's
    predicted best says it without the target batch."""
    batch = [f"micro-batch {strategy.micro_batch} x accumulation {strategy.accumulation}",
             *([f"{strategy.devices} devices"] if strategy.devices > 1 else [])]
    memory = []
    if strategy.recomputed_blocks:
        granularity = strategy.recompute_granularity
        memory.append(f"recompute {strategy.recomputed_blocks}/{facts.get('total_blocks') or 0} blocks"
                      + (f" ({granularity})" if granularity != "full" else ""))
    if strategy.sharding_stage:
        memory.append(f"sharding stage {strategy.sharding_stage}")
    factors = " x ".join(batch) + (f" = {target_batch}" if target_batch is not None else "")
    return ", ".join([strategy.precision, factors, *memory])


def measured_lines(facts: dict[str, Any]) -> list[str]:
    """What `vramtune measure` says of a result's facts about the model: the repeated blocks found."""
    total = facts.get("total_blocks")
    return [] if total is None else [f"repeated blocks found: {total}"]


def chosen_lines(result: ProbeResult) -> list[str]:
    """Lines about a chosen result: PEFT's trained parameters, the evaluation's batch and what it keeps."""
    return [*_peft_lines(result.facts), *_evaluation_lines(result.facts)]


def _peft_lines(facts: dict[str, Any]) -> list[str]:
    applied, trained, total = facts.get("peft"), facts.get("trainable_params"), facts.get("total_params")
    if not (applied and total):
        return []
    label = " + ".join(([f"prefix tuning ({applied['prefix_tokens']} tokens)"] if applied["prefix_tokens"] else [])
                       + ([f"LoRA r={applied['lora']['rank']}"] if applied["lora"] else []))
    return [f"{label}: {trained:,} of {total:,} parameters trained ({trained / total:.2%})"]


def _evaluation_lines(facts: dict[str, Any]) -> list[str]:
    chosen, requested = facts.get("eval_batch"), facts.get("eval_requested")
    if chosen is None:
        return []
    peak = peak_with_kept(facts["eval_peaks"].get(str(chosen)), facts, chosen)
    kept = facts["eval_kept"][str(chosen)]
    steps = facts.get("eval_accumulation_steps")
    lowered = f" (lowered from {requested}: larger ones do not fit)" if chosen < requested else ""
    keeping = ("keeps nothing on the device from step to step" if not kept else
               f"keeps {format_bytes(kept / chosen)} per sample on the device for the whole evaluation set "
               "(bound it with the evaluation's accumulation steps: eval_accumulation_steps in a Trainer's "
               "arguments, train.evaluation.accumulation_steps in a spec)" if not steps else
               f"up to {steps} steps of {format_bytes(kept)} kept on the device, counted")
    return [f"evaluation at batch {chosen}{lowered}: peak {format_bytes(peak)} with the training state resident; "
            f"{keeping}"]
