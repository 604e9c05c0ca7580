"""What a kit's training loop holds beside the model's training state, counted for the estimate: PaddleOCR's EMA
(`Global.use_ema`: `ModelEMA`'s fp32 shadows, a tensor for every entry of the model's state_dict) and the deep
copies of the state its tools/program.py keeps in locals (dialects/kits/ocr_ema.py: `kept_copies`), each tensor
once: the weights, at the training precision. The count reports both (Counts.ema_elements, Counts.state_copies).

The estimate's CPU probes hold them too, in fp32, and measure them with the activations (the rest of the peak above
the counted state): the rows take the fp32 bytes out of the activations before AMP's factor scales those, and count
them as a part of the state at the row's precision instead."""
from __future__ import annotations

from typing import Any

FP32 = 4


def held(counts: Any, weights: int) -> int:
    """The EMA's shadows and the kept copies, beside `weights` bytes of weights (a row's, at its precision)."""
    return FP32 * counts.ema_elements + counts.state_copies * weights


def probed(counts: Any) -> int:
    """What the estimate's fp32 CPU probes held of it: in their measured activations."""
    return held(counts, FP32 * counts.params)


def notes(counts: Any) -> list[str]:
    """The estimate's note on the figure: counted, not measured, and what it is."""
    if not probed(counts):
        return []
    copies = counts.state_copies
    return [f"counted: the kit's EMA, fp32 shadows of the model's state ({FP32 * counts.ema_elements:,} B)"
            + (f", and {copies} cop{'y' if copies == 1 else 'ies'} of its weights that tools/program.py keeps aside "
               f"(x{copies} the weights as each row holds them: {copies * FP32 * counts.params:,} B in fp32)"
               if copies else "")
            + "; the CPU probes held them in fp32, and their bytes are taken out of the measured activations"]
