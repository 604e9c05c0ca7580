"""A spec's `tuned:` section, as `vramtune apply` writes it: one an older vramtune wrote is refused by name."""
from __future__ import annotations

from typing import Any


def outdated(tuned: dict[str, Any]) -> list[str]:
    """Why a `tuned:` section an older vramtune wrote is not read (a field renamed since); [] when it is current."""
    if "recompute_layers" in tuned and "recomputed_blocks" not in tuned:
        return ["was written by vramtune 0.1 (recompute_layers); rerun `vramtune apply` to rewrite it"]
    return []
