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


def linear_fit(rows: Sequence[Sequence[float]], values: Sequence[float]) -> list[float] | None:
    """Least-squares coefficients c of sum(c_i * row_i) = value (normal equations, Gauss-Jordan); None when the
    rows do not determine them (too few, or dependent)."""
    n = len(rows[0]) if rows else 0
    if len(rows) < n or n == 0:
        return None
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * v for r, v in zip(rows, values))]
              for i in range(n)]
    for i in range(n):
        pivot = max(range(i, n), key=lambda k: abs(matrix[k][i]))
        if abs(matrix[pivot][i]) < 1e-12 * max(1.0, max(abs(x) for x in matrix[pivot][:n])):
            return None
        matrix[i], matrix[pivot] = matrix[pivot], matrix[i]
        matrix[i] = [x / matrix[i][i] for x in matrix[i]]
        for k in range(n):
            if k != i:
                matrix[k] = [a - matrix[k][i] * b for a, b in zip(matrix[k], matrix[i])]
    return [row[n] for row in matrix]
