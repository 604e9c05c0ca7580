"""`estimate`'s factors from a saved doctor result of the card it estimates for (a GPU whose memory is within
CARD_MATCH of --card; this Paddle version's first, then the newest): each check's `factors` from its figures (AMP O1
and O2 activations over fp32's, the allocator's reserve). Only a passed check's figures are used; what the doctor did
not measure stays stated, and the factors' source says which came from it."""
from __future__ import annotations

from vramtune.doctor import saved
from vramtune.doctor.base import PASS
from vramtune.doctor.battery import DoctorResult
from vramtune.doctor.checks import checks
from vramtune.memory.state import Factors

CARD_MATCH = 0.1  # a 24 GiB card is 23.6 GiB to Paddle; an "80GB" one 79.2 GiB


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
    values, measured, calibrated = {}, [], []
    for check in checks():
        calibrated.extend(check.calibrates)
        found = result.check(check.name)
        if found and found.status == PASS:
            for factor, (words, value) in check.factors(found.figures).items():
                values[factor] = value
                measured.append(words)
    if not measured:
        return None
    device = result.device
    rest = [words for words in calibrated if words not in measured]
    source = (f"{', '.join(measured)} measured by vramtune doctor on {device.name}, Paddle {device.paddle_version}, "
              f"{result.when[:10]}" + (f"; stated: {', '.join(rest)}" if rest else ""))
    return Factors(**{**vars(Factors()), **values, "source": source})
