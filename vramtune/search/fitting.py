"""The least-squares line both models fit (memory against the micro-batch or a mechanism's term; 1/speed
against 1/m)."""
from __future__ import annotations

from collections.abc import Sequence


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Intercept and slope (any sign) of the line through (x, y) points; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return mean_y - slope * mean_x, slope
