"""The boundary: the last of a setting's candidates, ordered by increasing memory, that fits — predicted from the
memory model, verified by a probe, corrected on a miss (bisecting after a probe that failed without figures)."""
from __future__ import annotations

from vramtune.core.strategy import Strategy
from vramtune.search.record import Record

NEIGHBOUR_MARGIN = 0.03  # a neighbour predicted over the limit by more than this is not probed


def boundary(record: Record, rung: str, candidates: list[Strategy]) -> Strategy | None:
    """The last candidate that fits, for candidates ordered by increasing memory (predict, verify, correct); it
    stops where a probe told a micro-batch floor above a candidate not probed yet (the caller runs again)."""
    limit, results, prediction = record.problem.limit, record.results, record.prediction
    low, high = -1, len(candidates)
    for index, strategy in enumerate(candidates):
        if strategy in results:
            if results[strategy].status == "fits":
                low = max(low, index)
            else:
                high = min(high, index)
    prior = True  # unfitted coefficients taken at their bound, until a probe fails without figures
    blind = False  # the last probe failed without figures: the model that chose it says nothing new, so bisect
    while high - low > 1:
        if any(s.micro_batch < record.floor and s not in results for s in candidates):
            break  # a probe told the floor: the caller runs again from it (plain_boundary)
        model = prediction.memory_model(candidates[0])
        predicted = [model.predict(s) for s in candidates]
        largest = prediction.largest(model)
        least = [model.least(s, largest) for s in candidates]
        inside = range(low + 1, high)
        if low >= 0 and least[low + 1] is not None and least[low + 1] > limit * (1 + NEIGHBOUR_MARGIN):
            break  # the next one up cannot fit even if each mechanism saved the most it can
        if prior:
            unmeasured = not model.points
            predicted = [p if p is not None else prediction.prior(s) if unmeasured else bound
                         for s, p, bound in zip(candidates, predicted, least)]
        hopeful = [i for i in inside if predicted[i] is not None and predicted[i] <= limit]
        if blind:
            index = (low + high) // 2
        elif hopeful:
            index = max(hopeful)
        elif all(predicted[i] is None for i in inside):
            index = (low + high) // 2 if low >= 0 or high < len(candidates) else low + 1  # bisect
        else:
            index = low + 1
            if low >= 0 and predicted[index] is not None and predicted[index] > limit * (1 + NEIGHBOUR_MARGIN):
                break  # the next one up is confidently over the budget
        result = record.probe(rung, candidates[index])
        if result.status == "unstable":
            break  # a numeric failure, not a memory one: no other candidate cures it
        blind = not result.used_bytes and result.status != "fits"
        prior = prior and not blind
        if result.status == "fits":
            low = index
        else:
            high = index
    return candidates[low] if low >= 0 else None


def plain_boundary(record: Record, base: Strategy) -> tuple[list[Strategy], Strategy | None]:
    """The setting's candidates with every axis off, smallest first, and the largest that fits (None: none
    does). Those below the micro-batch floor are among them only where measured before a probe told the floor
    (its first probe's facts): the boundary reads them but probes nothing below the floor, where no probe can be
    chosen. Where one of this boundary's own probes told the floor, the boundary stops and runs again, its probes
    reused (unless that probe was a numeric failure, which no micro-batch cures)."""
    every = [record.problem.sized(base, m) for m in reversed(record.problem.micro_batches)]
    while True:
        floor = record.floor
        ascending = [s for s in every if s.micro_batch >= floor or s in record.results]
        found = boundary(record, "accumulation", ascending)
        if record.floor == floor or record.unstable(base) is not None:
            return ascending, found

