"""The hybrid-parallel layout a PaddleFormers 1.x file states with its parallel keys (the ones `keys.REFUSED`
refuses for a probe): read for `vramtune estimate`, which predicts its per-rank and per-stage peak; a probe cannot
run it on this machine yet (multi-rank probes are a later step)."""
from __future__ import annotations

import re
from math import gcd
from typing import Any

from vramtune.core.reading import switched_on
from vramtune.dialects.paddleformers.codec import EVERY_LAYER, FORMERS_DEFAULTS
from vramtune.dialects.paddleformers.reading import DEFAULT_BATCH
from vramtune.memory.parallel import Layout

DEGREES = {"tensor_model_parallel_size": "mp", "pipeline_model_parallel_size": "pp",
           "virtual_pipeline_model_parallel_size": "vpp", "expert_model_parallel_size": "ep"}
FLAGS = ("sequence_parallel", "use_expert_parallel")
LAYOUT_KEYS = (*DEGREES, *FLAGS)  # what estimate reads of the keys a probe refuses
NEUTRAL = {**{key: "1" for key in DEGREES}, **{key: "false" for key in FLAGS}}  # each key's value that turns it off


def _degree(config: dict[str, Any], key: str) -> int:
    value = config.get(key, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def states_layout(config: dict[str, Any]) -> bool:
    """Whether the file sets any parallel degree above 1 or sequence/expert parallelism."""
    return any(_degree(config, key) > 1 for key in DEGREES) or any(switched_on(config.get(key)) for key in FLAGS)


def stated_layout(config: dict[str, Any], devices: int | None) -> Layout:
    """The file's layout on `devices` (default: the fewest its degrees take: sharding_parallel_size's replicas, else
    the fewest whose dp x tp the expert group divides), its batch and every-layer recompute."""
    degrees = {field: _degree(config, key) for key, field in DEGREES.items()}
    mp, pp, ep = degrees["mp"], degrees["pp"], degrees["ep"]
    if devices:
        dp = max(devices // (mp * pp), 1)
    else:
        dp = _degree(config, "sharding_parallel_size") if "sharding_parallel_size" in config else ep // gcd(ep, mp)
    match = re.search(r"stage(\d)", str(config.get("sharding", FORMERS_DEFAULTS["sharding"]) or ""))
    return Layout(dp=dp, mp=mp, pp=pp, vpp=degrees["vpp"], ep=ep, stage=int(match.group(1)) if match and dp > 1 else 0,
                  sp=switched_on(config.get("sequence_parallel")),
                  micro_batch=int(config.get("per_device_train_batch_size", DEFAULT_BATCH)),
                  accumulation=int(config.get("gradient_accumulation_steps", 1)),
                  recompute=all(config.get(key) == value for key, value in EVERY_LAYER.items()))


def layout_keys(layout: Layout) -> dict[str, Any]:
    """The PaddleFormers keys that train with `layout` (sharding over its dp ranks, or none: "" where PaddleFormers'
    default stage1 would shard; every layer recomputed or none)."""
    keys: dict[str, Any] = {"tensor_model_parallel_size": layout.mp, "pipeline_model_parallel_size": layout.pp}
    if layout.vpp > 1:
        keys["virtual_pipeline_model_parallel_size"] = layout.vpp
    keys["sequence_parallel"] = layout.sp
    if layout.ep > 1:
        keys.update({"use_expert_parallel": True, "expert_model_parallel_size": layout.ep})
    if layout.dp > 1:
        keys["sharding"] = f"stage{layout.stage}" if layout.stage else ""
    keys.update({"per_device_train_batch_size": layout.micro_batch,
                 "gradient_accumulation_steps": layout.accumulation})
    return {**keys, **(EVERY_LAYER if layout.recompute else {})}
