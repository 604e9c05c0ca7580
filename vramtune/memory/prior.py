"""The activation prior: a model's fp32 activation bytes per sample, predicted before any probe.

Where vramtune knows the model by its config.json (a PaddleFormers spec points at a model folder), the estimate's
analytic per-layer model (estimating/analytic.py) predicts the activations one sample holds; with the state counted
before the first probe (memory/counted.py) that puts a whole line, not only its intercept, before any figure. The
ladder uses it only to place probes (search/prediction.py `activation_prior`): the first probe of a setting goes to
the largest micro-batch predicted to fit with PRIOR_MARGIN to spare, a probe is not run where even activations
PRIOR_ERROR times smaller than predicted put it past the card, and once a probe placed by it fails without figures it
is not used again (the search bisects, as without it). Every choice is still measured. For other sources: None.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vramtune.memory.analytic import FLASH, activations
from vramtune.memory.architecture import ArchitectureError, architecture, read_config

PRIOR_MARGIN = 0.2  # a first probe is placed where activations this much larger than predicted would still fit
PRIOR_ERROR = 2.0  # a probe is skipped only where activations this many times smaller would still not fit the card


def per_sample(config: dict[str, Any], seq: int, flash: bool) -> float | None:
    """fp32 activation bytes of one sample with nothing recomputed (the layers and what is outside them: the logits,
    eager attention's mask); None for a config.json the analytic model cannot read."""
    try:
        arch = architecture(config)
    except ArchitectureError:
        return None
    return activations(arch, seq, flash).activations(arch.layers, 1, 0)


def model_prior(folder: str, seq: int, attention: str, device_kind: str) -> float | None:
    """The prior of a model folder's config.json at the sequence length a probe measures; flash attention (no [s, s]
    tensor kept) only where it runs, on a GPU. None where its config.json cannot be read."""
    try:
        config = read_config(Path(folder))
    except ArchitectureError:
        return None
    return per_sample(config, seq, device_kind == "gpu" and attention in FLASH)
