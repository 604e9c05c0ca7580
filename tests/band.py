"""The real-client tests' band (issue 36): vramtune's probe within 1% of the peak the user's own tool reaches on the
same file, and never under it by more than 0.5%, under being the side that runs a user out of memory.

With $VRAMTUNE_BAND_LOG set to a file, each comparison is appended to it as a JSON line (the test, what, probe,
tool, ratio): the axis table of a run."""
from __future__ import annotations

import json
import os

OVER, UNDER = 0.01, 0.005


def log_band(probe: int, tool: int, what: str = "") -> float:
    """Appends the comparison to $VRAMTUNE_BAND_LOG when set (also for a test holding its own tolerance); the ratio."""
    ratio = probe / tool
    if os.environ.get("VRAMTUNE_BAND_LOG"):
        with open(os.environ["VRAMTUNE_BAND_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], "what": what,
                                  "probe": probe, "tool": tool, "ratio": round(ratio, 6)}) + "\n")
    return ratio


def assert_in_band(probe: int, tool: int, what: str = "") -> None:
    ratio = log_band(probe, tool, what)
    assert 1 - UNDER <= ratio <= 1 + OVER, f"{what}probe {probe:,} B / tool {tool:,} B = {ratio:.4f}"
