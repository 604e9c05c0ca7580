"""The parts of the vramtune spec a kit config becomes that every kit's has alike (its batch, the model keys, the
spec's frame), the batch-only spec of the kits whose config carries no other memory key (PaddleSeg,
PaddleDetection), and what `apply` says when the kit cannot train the target as the file writes it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vramtune.dialects.kits.codec import batch_only
from vramtune.dialects.kits.config import Kit, KitError, get_key

MIN_BATCH = 2  # BatchNorm without accumulation: batch 1 normalises one image per channel (16 would leave nothing)


def positive_batch(config: dict[str, Any], key: str, path: Path) -> int:
    """The config's batch at `key`; KitError unless a positive integer."""
    batch = get_key(config, key)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise KitError(f"{path}: {key} must be a positive integer, got {batch!r}")
    return batch


def kit_spec(kit: Kit, path: Path, checkout: Path, options: list[str], probe_options: list[str],
             train: dict[str, Any], search: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The raw spec of a kit config: its model (the config in its checkout, the user's overrides and the probe's),
    `train` and `search` (and `more` sections), the device and the budget left to the command line."""
    return {"name": path.stem,
            "model": {"source": kit.name, "config": str(path.resolve()), "checkout": str(checkout),
                      "options": list(options), "probe_options": probe_options},
            "data": {}, "train": train, "device": "auto", "budget": "auto", "search": search, **more}


def batch_only_spec(kit: Kit, path: Path, checkout: Path, options: list[str], probe_options: list[str],
                    batch: int, optimizer: str | None) -> dict[str, Any]:
    """The spec of a kit that neither accumulates nor recomputes and whose AMP is a flag: fp32 batches from
    MIN_BATCH (or the config's batch, if smaller) to the config's, with vramtune's optimizer of the same state
    (AdamW's for one it does not know)."""
    return kit_spec(kit, path, checkout, options, probe_options,
                    {"target_batch": batch, "optimizer": optimizer or "adamw", "learning_rate": 0.001},
                    {**batch_only(), "min_micro_batch": min(MIN_BATCH, batch)})


def smaller_batch(advice: str, tuned: Any) -> list[str]:
    """The kit's learning-rate advice (`advice` with {target}, {batch} and {ratio}) where the written batch is
    smaller than the target: a kit that cannot accumulate trains a smaller effective batch."""
    batch = tuned.strategy.micro_batch
    target = batch * tuned.strategy.accumulation  # per card, as the kits' batch keys are
    return [advice.format(target=target, batch=batch, ratio=batch / target)] if batch < target else []


def base_advice(raw: Any, key: str) -> list[str]:
    """Where the user's file inherits (`key`: _base_, _BASE_): the tuned file must stay beside it."""
    bases = raw.get(key) if isinstance(raw, dict) else None
    if not bases:
        return []
    said = bases if isinstance(bases, str) else ", ".join(map(str, bases))
    return [f"the tuned file's {key} paths ({said}) are relative to its folder: keep it beside the config (apply's "
            "default output) or the kit will not find them"]
