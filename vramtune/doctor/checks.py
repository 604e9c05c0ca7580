"""The checks `vramtune doctor` runs, in order: what every measurement rests on (the device, the counters, the
budget's enforcement), then each mechanism's own (its `doctor_checks`, in registry order: a mechanism is checked by
its own folder), then the allocator's reserve. Read from the live registry."""
from __future__ import annotations

from vramtune.doctor import allocator, budget, counters, device
from vramtune.doctor.base import Check
from vramtune.plugins import MECHANISMS

GATING = ("device", "counters", "budget")  # what every GPU measurement depends on


def checks() -> tuple[Check, ...]:
    return (device.CHECK, counters.CHECK, budget.CHECK,
            *(check for mechanism in MECHANISMS for check in mechanism.doctor_checks()), allocator.CHECK)


def by_name() -> dict[str, Check]:
    return {check.name: check for check in checks()}
