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


def largest_fitting(facts: dict[str, Any], limit: float, ratio: float = 1.0) -> int | None:
    """The largest evaluation batch measured whose peak with what it keeps, times `ratio` (a tool's evaluation over
    the probe's), is within the limit."""
    fitting = [int(size) for size, peak in (facts.get("eval_peaks") or {}).items()
               if peak is not None and peak_with_kept(peak, facts, int(size)) * ratio <= limit]
    return max(fitting, default=None)
