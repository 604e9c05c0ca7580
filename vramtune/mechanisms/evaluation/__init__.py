"""Evaluation as a phase of the run: after a probe's measured training steps, with the training state still resident
(weights, zeroed gradients, optimizer state), evaluation steps run the way PaddleNLP's Trainer runs its prediction
step: the model in eval mode, no grad, the training's auto_cast, loss and logits computed. A configuration fits only
if both phases fit; the evaluation batch is tuned too: the largest, not above the one asked, whose peak fits.

What the evaluation loop keeps per step (loss, the llm scripts' argmax predictions, or full logits, with the labels)
stays on the device until `eval_accumulation_steps` steps have run (by default, for the whole evaluation set): with
that setting the kept buffer, which the loop's concatenation copies, is counted; without it the report says what each
sample adds.

Spec: `train.evaluation: {batch: 32, keep: logits | predictions | loss, accumulation_steps: N}`. A PaddleNLP
arguments file: `do_eval` or an `evaluation_strategy` other than `no`, `per_device_eval_batch_size`,
`eval_accumulation_steps`, `prediction_loss_only` (else the llm scripts' argmax predictions).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vramtune.core.reading import Section, positive
from vramtune.mechanisms.base import Mechanism
from vramtune.mechanisms.evaluation.kept import peak_with_kept

KEEP = ("logits", "predictions", "loss")


@dataclass
class EvaluationSettings:
    batch: int = 8  # the evaluation batch asked for (per device)
    keep: str = "logits"  # what each evaluation step keeps on the device
    accumulation_steps: int | None = None  # steps kept on the device before moving to the host (None: all)


class Evaluation(Mechanism):
    name = "evaluation"

    def read(self, spec) -> EvaluationSettings | None:
        raw = spec.train.data.get("evaluation")
        spec.train.seen.add("evaluation")
        if raw is None:
            return None
        if not isinstance(raw, dict):
            spec.train.fail("evaluation", f"must be a mapping {{batch, keep, accumulation_steps}}, got {raw!r}")
            return None
        section = Section(spec.train.problems, spec.train.file, spec.train.key("evaluation"), raw)
        settings = EvaluationSettings(
            batch=section.get("batch", int, 8, check=positive(1 << 20)) or 8,
            keep=section.get("keep", str, "logits", choices=KEEP) or "logits",
            accumulation_steps=section.get("accumulation_steps", int, None, check=positive(1 << 20)))
        section.finish()
        return settings


    def child_settings(self, settings: EvaluationSettings | None, budget) -> dict[str, Any] | None:
        """The limit picks which evaluation batches the child measures; the parent judges them again."""
        return {**dataclasses.asdict(settings), "limit": budget.limit} if settings else None

    def judge(self, result, limit: float) -> str | None:
        facts = result.facts
        if "eval_requested" not in facts:
            return None
        peaks = {int(size): peak for size, peak in facts.get("eval_peaks", {}).items()}
        chosen = facts.get("eval_batch")
        if chosen is not None and peak_with_kept(peaks.get(chosen), facts, chosen) <= limit:
            return None
        smallest = min(peaks, default=None)
        if smallest is None or peaks[smallest] is None:
            return f"evaluation ran out of memory even at batch {smallest}"
        return (f"evaluation does not fit even at batch {smallest}: its peak "
                f"{int(peak_with_kept(peaks[smallest], facts, smallest))} bytes > {int(limit)} bytes")

    # -- child side --------------------------------------------------------------------------------------
    def after_measure(self, run, settings) -> dict[str, Any]:
        """Not when training alone is over the limit: the probe does not fit whatever evaluation does."""
        if not settings or run.peak_bytes > settings["limit"]:
            return {}
        from vramtune.mechanisms.evaluation.measuring import EvaluationRun

        measured = EvaluationRun(run, settings)
        measured.search()
        fitting = [size for size in measured.peaks if measured.fits(size)]
        return {"eval_requested": settings["batch"], "eval_batch": max(fitting, default=None),
                "eval_peaks": {str(k): v for k, v in measured.peaks.items()},
                "eval_kept": {str(k): v for k, v in measured.kept.items()},
                "eval_accumulation_steps": settings["accumulation_steps"]}


MECHANISM = Evaluation()
