"""`estimate`'s factors from a saved doctor result of the card it estimates for (a GPU whose memory is within
CARD_MATCH of --card; this Paddle version's first, then the newest): AMP O1 and O2 activations over fp32's (the AMP
check's small transformer, each precision the card has; medians) and the allocator's reserve. Only a passed check's
figures are used; what the doctor did not measure stays stated, and the factors' source says which came from it."""
from __future__ import annotations

import statistics

from vramtune.doctor import saved
from vramtune.doctor.allocator import reserve
from vramtune.doctor.amp import activation_ratio
from vramtune.doctor.base import PASS, CheckRun
from vramtune.doctor.battery import DoctorResult
from vramtune.estimating.model import Factors

CARD_MATCH = 0.1  # a 24 GiB card is 23.6 GiB to Paddle; an "80GB" one 79.2 GiB
FIGURES = ("AMP O1 activations", "AMP O2 activations", "the allocator's reserve")


def matching(card_bytes: int, paddle_version: str) -> DoctorResult | None:
    """The saved doctor result of a GPU with this card's memory: this Paddle version's first, then the newest."""
    cards = [result for result in saved.load_all() if result.device.kind == "gpu"
             and abs(result.device.total_bytes - card_bytes) <= CARD_MATCH * card_bytes]
    return min(cards, key=lambda result: result.device.paddle_version != paddle_version, default=None)


def doctor_factors(card_bytes: int, paddle_version: str) -> Factors | None:
    """Factors with what a saved doctor run on such a card measured, or None when none did."""
    result = matching(card_bytes, paddle_version)
    if result is None:
        return None
    stated, measured, values = Factors(), [], {}
    amp = result.check("amp")
    if amp and amp.status == PASS:
        runs = {part: CheckRun("measured", figures) for part, figures in amp.figures.items()}
        for level, factor in (("O1", "o1_activations"), ("O2", "o2_activations")):
            ratios = [activation_ratio(runs, part) for part in runs if part.endswith(level)]
            if ratios:
                values[factor] = statistics.median(ratios)
                measured.append(f"AMP {level} activations")
    allocator = result.check("allocator")
    if allocator and allocator.status == PASS:
        values["fragmentation"] = reserve(allocator.figures[""])
        measured.append("the allocator's reserve")
    if not measured:
        return None
    device = result.device
    rest = [name for name in FIGURES if name not in measured]
    source = (f"{', '.join(measured)} measured by vramtune doctor on {device.name}, Paddle {device.paddle_version}, "
              f"{result.when[:10]}" + (f"; stated: {', '.join(rest)}" if rest else ""))
    return Factors(**{**vars(stated), **values, "source": source})
