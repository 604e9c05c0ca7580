"""`vramtune doctor`: checks, on the user's device, every assumption vramtune's measurements rest on (the counters,
the budget's enforcement, AMP, recompute, ranks, the allocator's reserve). Each check (one module here) measures in
child processes of its own and is judged in the parent; the result is saved per device and Paddle version, gates
the first GPU probe (GATING) and calibrates `estimate`."""
from __future__ import annotations

from vramtune.doctor import allocator, amp, budget, counters, device, ranks, recompute
from vramtune.doctor.base import Check

CHECKS: tuple[Check, ...] = (device.CHECK, counters.CHECK, budget.CHECK, amp.CHECK, recompute.CHECK, ranks.CHECK,
                             allocator.CHECK)
GATING = ("device", "counters", "budget")  # what every GPU measurement depends on
BY_NAME = {check.name: check for check in CHECKS}
