"""What PaddleNLP's and PaddleFormers' Trainers share in their keys: the sharding options vramtune does not measure
(both dialects refuse them in the same words)."""
from __future__ import annotations

from vramtune.core.reading import Section


def refuse_sharding_extras(section: Section, mode: str, options: str) -> None:
    """Offloading sharding to the host, and sharding_parallel_config's options with sharding on: not measured."""
    if "offload" in mode:
        section.fail("sharding", f"{mode!r}: offloading to the host is not measured by vramtune: drop offload")
    if options.strip() and mode.strip():
        section.fail("sharding_parallel_config", f"{options!r} changes how sharding holds its buffers, which vramtune "
                                                 "does not measure: leave it empty to tune")
