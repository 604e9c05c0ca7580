"""The real-client tests' band (issue 36): vramtune's probe within 1% of the peak the user's own tool reaches on the
same file, and never under it by more than 0.5%, under being the side that runs a user out of memory."""
from __future__ import annotations

OVER, UNDER = 0.01, 0.005


def assert_in_band(probe: int, tool: int, what: str = "") -> None:
    ratio = probe / tool
    assert 1 - UNDER <= ratio <= 1 + OVER, f"{what}probe {probe:,} B / tool {tool:,} B = {ratio:.4f}"
