"""The checks `vramtune doctor` runs, in order: what every measurement rests on (the device, the counters, the
budget's enforcement), then what the mechanisms assume of Paddle (AMP's casts, recompute's saving, the ranks of data
parallel and sharding), then the allocator's reserve."""
from __future__ import annotations

from vramtune.doctor import allocator, amp, budget, counters, device, ranks, recompute
from vramtune.doctor.base import Check

GATING = ("device", "counters", "budget", "allocator")  # what every GPU measurement depends on
MULTI_RANK = ("ranks",)  # what a GPU probe of several ranks depends on besides


def checks() -> tuple[Check, ...]:
    return (device.CHECK, counters.CHECK, budget.CHECK, amp.CHECK, recompute.CHECK, ranks.CHECK, allocator.CHECK)


def by_name() -> dict[str, Check]:
    return {check.name: check for check in checks()}
