"""What an evaluation keeps on the device from step to step, and the peak that must fit with it (Paddle-free: the
mechanism's verdict, the child's measuring and the report's words share it)."""
from __future__ import annotations

from typing import Any

MAX_MEASUREMENTS = 6  # evaluation batches measured per probe


def kept_factor(accumulation_steps: int | None) -> int:
    """Kept steps alive at the loop's peak: the buffer of the earlier ones is copied when a step is concatenated."""
    return 2 * (accumulation_steps - 1) if accumulation_steps else 0


def peak_with_kept(peak: int | None, facts: dict[str, Any], size: int | None) -> float:
    """One evaluation step's peak plus what the earlier kept steps hold (when eval_accumulation_steps bounds them):
    what must fit, and what the report says of the evaluation batch chosen."""
    if peak is None or size is None:
        return float("inf")
    return peak + kept_factor(facts.get("eval_accumulation_steps")) * facts["eval_kept"][str(size)]


def probe_evaluation(facts: dict[str, Any], size: int | None) -> int | None:
    """The probe's evaluation peak at this batch with what it keeps (None: not measured there), beside which a
    verification run's evaluation pass is read."""
    peak = (facts.get("eval_peaks") or {}).get(str(size)) if size is not None else None
    return int(peak_with_kept(peak, facts, size)) if peak is not None else None


def largest_fitting(facts: dict[str, Any], limit: float, ratio: float = 1.0, state: int | None = None) -> int | None:
    """The largest evaluation batch whose peak with what it keeps, times `ratio` (a tool's evaluation over the
    probe's), is within the limit: a measured one, or, between the largest measured that fits and the smallest that
    does not, the largest a line through the measured peaks predicts (through the training state `state` at batch 0
    where one batch only was measured). A predicted batch is the verification's to prove: it is verified again."""
    totals = {int(size): peak_with_kept(peak, facts, int(size))
              for size, peak in (facts.get("eval_peaks") or {}).items()}
    measured = max((size for size, total in totals.items() if total * ratio <= limit), default=None)
    over = min((size for size, total in totals.items() if total * ratio > limit), default=None)
    points = sorted((size, total) for size, total in totals.items() if total != float("inf"))
    if over is None or not points:
        return measured
    if len(points) == 1:
        if state is None or state >= points[0][1]:
            return measured
        points = [(0, state), *points]
    (small, low), (large, high) = points[0], points[-1]
    slope = (high - low) / (large - small) if large > small else 0
    if slope <= 0:
        return measured
    guess = min(over - 1, int(small + (limit / ratio - low) / slope))
    return guess if guess >= 1 and guess > (measured or 0) else measured
