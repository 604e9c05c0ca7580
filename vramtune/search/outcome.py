"""The search's outcome: the choice among every probe (at or above the micro-batch floor, noted where it bound), and
where nothing fits, the closest miss and what would make it fit."""
from __future__ import annotations

from vramtune.core.records import ProbeResult
from vramtune.core.units import format_bytes
from vramtune.mechanisms.base import SearchView
from vramtune.search.choice import choose
from vramtune.search.problem import GiB, Outcome
from vramtune.search.record import Record


def finish(search: SearchView, record: Record) -> Outcome:
    """The outcome of the probes recorded so far (`search`: what the mechanisms' suggestions are given)."""
    probes = list(record.results.values())
    floor, why = record.floor_and_why()
    chosen = choose(record.roles.all, probes, floor)
    below = [r for r in probes if r.fits and r.strategy.micro_batch < floor]
    if below:  # measured before a probe told the floor, or saved by an earlier run
        fastest = max(below, key=lambda r: r.samples_per_sec)
        record.note(f"micro-batch floor {floor} applied ({why}); the fastest below it: "
                    f"{fastest.strategy.label()} at {fastest.samples_per_sec:.1f} samples/s")
    elif why and floor > record.problem.micro_batches[-1] and stopped_at_floor(record, chosen, floor):
        record.note(f"micro-batch floor {floor} applied ({why}); nothing below it probed")
    outcome = Outcome(chosen, probes, record.notes)
    if chosen is None:  # the closest miss a larger budget would make a choice: over it, at the floor or above
        misses = [r for r in probes if (r.used_bytes or 0) > record.problem.limit and r.strategy.micro_batch >= floor]
        outcome.closest = min(misses, key=lambda r: r.used_bytes or 0) if misses else None
        outcome.suggestions = suggest(search, record, outcome.closest)
    return outcome


def stopped_at_floor(record: Record, chosen: ProbeResult | None, floor: int) -> bool:
    """The search came down to the floor and would have gone on below it: nothing fits, or the floor is chosen."""
    reached = any(s.micro_batch == floor for s in record.results)
    return reached and (chosen is None or chosen.strategy.micro_batch == floor)


def suggest(search: SearchView, record: Record, closest: ProbeResult | None) -> list[str]:
    """What would make the closest miss fit."""
    tips = []
    budget = record.problem.budget
    if closest is not None:
        needed = budget.needed_for(closest.used_bytes)
        tips.append(f"a budget of {format_bytes(needed, up=True)} (at least {needed} bytes), under which the "
                    f"closest measured, {closest.strategy.label()}, fits")
    elif record.least_state is not None:
        needed = budget.needed_for(int(record.least_state))
        tips.append(f"a budget of more than {format_bytes(needed, up=True)} ({needed} bytes): the "
                    f"least counted state (weights, gradients and optimizer state) alone takes "
                    f"{record.least_state / GiB:.2f} GiB per rank, before any activation; fewer trainable "
                    "parameters or more ranks to partition it over shrink it")
    for mechanism in record.roles.all:
        tips.extend(mechanism.suggest(search))
    tips.append("a shorter sequence / smaller images, or a smaller model")
    return tips
