"""Evaluation's Paddle side: evaluation steps at chosen batches in the probe's process, as the Trainer's prediction
step runs them, after the measured training steps."""
from __future__ import annotations

from typing import Any

import paddle

from vramtune.core.oom import is_oom
from vramtune.mechanisms.evaluation.kept import MAX_MEASUREMENTS, kept_factor


class EvaluationRun:
    """Evaluation steps at chosen batches in the probe's process. With resettable counters (Paddle 3) the asked batch
    first, then smaller ones predicted from a line through the measured peaks; without (Paddle 2.6: a reading is
    the peak since the process started) batches in increasing order, stopping at the first that does not fit."""

    def __init__(self, run: Any, settings: dict[str, Any]):
        self.run, self.settings = run, settings
        self.peaks: dict[int, int | None] = {}
        self.kept: dict[int, int] = {}

    def search(self) -> None:
        asked = self.settings["batch"]
        model = self.run.prepared.model
        model.eval()
        try:
            if not self.run.counters.resets:
                size = 1
                while self.measure(size) and size < asked:
                    size = min(asked, size * 2)
                return
            size: int | None = asked
            while size is not None and len(self.peaks) < MAX_MEASUREMENTS:
                self.measure(size)
                size = self.next_size()
        finally:
            model.train()

    def next_size(self) -> int | None:
        """Between the largest batch that fits and the smallest that does not: the largest a line through the
        measured peaks predicts to fit (halving while there is one point only)."""
        over = min((s for s in self.peaks if not self.fits(s)), default=None)
        lower = max((s for s in self.peaks if self.fits(s)), default=0) + 1
        if over is None or lower >= over:
            return None
        points = sorted((s, self.total(s)) for s in self.peaks if self.peaks[s] is not None)
        guess = over // 2
        if len(points) >= 2 and points[-1][0] > points[0][0]:
            (small, low), (large, high) = points[0], points[-1]
            slope = (high - low) / (large - small)
            guess = int(small + (self.settings["limit"] - low) / slope) if slope > 0 else over - 1
        return min(over - 1, max(lower, guess))

    def total(self, size: int) -> float:
        peak = self.peaks[size]
        if peak is None:
            return float("inf")
        return peak + kept_factor(self.settings["accumulation_steps"]) * self.kept[size]

    def fits(self, size: int) -> bool:
        return self.total(size) <= self.settings["limit"]

    def measure(self, size: int) -> bool:
        """One evaluation step at this batch, as the Trainer's prediction step runs it; whether it fits."""
        run = self.run
        batch = run.built.make_batch(size)
        outputs: list[Any] = []
        hook = run.prepared.model.register_forward_post_hook(lambda layer, inputs, output: outputs.append(output))
        try:
            run.counters.start()
            with paddle.no_grad(), run.prepared.runner.forward_context():
                loss = run.built.loss(run.prepared.model, batch)
            peak, reserved = run.counters.peak()
            self.peaks[size] = reserved if reserved is not None else peak
            self.kept[size] = _kept_bytes(self.settings["keep"], loss, outputs[-1] if outputs else None, batch)
        except Exception as error:
            if not is_oom(error):
                raise
            self.peaks[size], self.kept[size] = None, 0
        finally:
            hook.remove()
        return self.fits(size)


def _bytes(tensor: Any) -> int:
    return int(tensor.numel()) * tensor.element_size()


def _kept_bytes(keep: str, loss: Any, output: Any, batch: Any) -> int:
    """What the Trainer's evaluation loop keeps of one step: the loss, and unless only the loss is asked the labels
    with the logits or their argmax (int64, as the llm scripts' prediction step returns)."""
    if keep == "loss":
        return _bytes(loss)
    if hasattr(output, "numel"):
        tensors = [output]
    else:
        tensors = [t for t in (output.values() if isinstance(output, dict) else output or ()) if hasattr(t, "numel")]
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = max(tensors, key=lambda t: int(t.numel()), default=None)
    labels = (batch.get("labels") if isinstance(batch, dict) else batch[-1] if isinstance(batch, tuple) else None)
    kept = _bytes(loss) + (_bytes(labels) if hasattr(labels, "numel") else 0)
    if logits is None:
        return kept
    return kept + (_bytes(logits) if keep == "logits" else int(logits.numel()) // max(1, logits.shape[-1]) * 8)
