"""The strategy a PaddleFormers config states (what `check` and `measure` measure of it), read from the keys
codec.py's `to_formers` writes: the inverse of apply's writer, so it reads what the round trip through that writer
read (checking/stated.py; tests/formers/test_stated.py holds the two together).

Like the writer, it reads the file's own keys (the key=value overrides given after it set the spec's model, data and
ranks, not the file's strategy). A key the writer would add, or a value it never writes, is refused by name: `check`
never takes a parser's default for the strategy it measures."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from vramtune.core.reading import Problem, SpecError
from vramtune.core.spec import Spec
from vramtune.core.strategy import PURE, SHARDING_STAGES, Strategy
from vramtune.dialects.paddleformers.codec import BATCH_KEYS, COMPUTE_TYPES, EVERY_LAYER, file_counts, model_depth
from vramtune.dialects.paddleformers.reading import read_config

UNSTATED = ("is not stated: check measures the strategy the file states, as `vramtune apply` writes it, and never "
            "takes a parser's default for it")
Refuse = Callable[[str, str], None]  # (key, why): a problem with the file's strategy


def stated(spec: Spec, device_kind: str) -> Strategy:
    """The strategy the file states, for a probe on this kind of device: the batch per device, on a GPU the precision
    (a CPU runs fp32, as a CPU probe does), the layers recomputed (the model's config.json counts them), the sharding
    stage over the spec's ranks; or a SpecError naming every key it cannot read so."""
    keys, problems = read_config(Path(spec.path)), []

    def refuse(key: str, message: str) -> None:
        problems.append(Problem(spec.path, key, message))

    batch = _stated_batch(keys, spec.train.target_batch // spec.devices, refuse)
    precision = _stated_precision(keys, device_kind, refuse)
    blocks = _stated_blocks(keys, *model_depth(spec.model.folder), refuse)
    stage = _stated_stage(keys, spec.devices, refuse)
    degree, sequence = _stated_tensor_parallel(keys)
    if problems:
        raise SpecError(problems)
    return Strategy(precision=precision, micro_batch=batch[0], accumulation=batch[1], recomputed_blocks=blocks,
                    devices=spec.devices, sharding_stage=stage, tensor_parallel=degree, sequence_parallel=sequence)


def _stated_batch(keys: dict[str, Any], per_rank: int, refuse: Refuse) -> tuple[int, int]:
    """per_device_train_batch_size and gradient_accumulation_steps, whose product is the spec's batch per rank (an
    override after the file may set another)."""
    unread = [key for key in BATCH_KEYS if not _count(keys.get(key))]
    for key in unread:
        refuse(key, UNSTATED if keys.get(key) is None else f"{keys[key]!r}: not a batch `vramtune apply` writes (a "
                                                             "positive integer)")
    if unread:
        return 1, 1
    micro_batch, accumulation = (keys[key] for key in BATCH_KEYS)
    if micro_batch * accumulation != per_rank:
        refuse(BATCH_KEYS[0], f"{micro_batch} x gradient_accumulation_steps {accumulation} in the file, a batch of "
                              f"{per_rank} per device with the overrides given after it: check measures the batch "
                              "the file states (give the overrides that set no tuned key)")
    return micro_batch, accumulation


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _stated_precision(keys: dict[str, Any], device_kind: str, refuse: Refuse) -> str:
    """compute_type and, for a half type, fp16_opt_level (O1 or O2); fp32 on a CPU, whatever the file says."""
    compute_type, level = keys.get("compute_type"), keys.get("fp16_opt_level")
    dtype = {written: dtype for dtype, written in COMPUTE_TYPES.items()}.get(compute_type)
    if device_kind == "cpu" or dtype == "fp32":
        return "fp32"
    if compute_type is None:
        refuse("compute_type", UNSTATED)
    elif dtype is None:
        refuse("compute_type", f"{compute_type!r}: not a compute_type `vramtune apply` writes "
                               f"({', '.join(COMPUTE_TYPES.values())})")
    elif level is None:
        refuse("fp16_opt_level", f"{UNSTATED} (O1 or O2 with compute_type {compute_type})")
    elif level not in ("O1", "O2"):
        refuse("fp16_opt_level", f"{level!r}: not a level `vramtune apply` writes (O1, O2)")
    else:
        return f"{dtype}{PURE if level == 'O2' else ''}"
    return "fp32"


def _stated_blocks(keys: dict[str, Any], layers: int, model_type: str, refuse: Refuse) -> int:
    """Every layer (the model's config.json's) with the every-layer keys; the first N by the block method where the
    model's code recomputes those (granularity full, N below the layers); none with any other combination (the
    model recomputes nothing with it, and apply leaves it as it is)."""
    facts, _ = file_counts(layers, model_type)
    granularity, method, count = (keys.get(key) for key in EVERY_LAYER)
    if all(keys.get(key) == value for key, value in EVERY_LAYER.items()):
        if not layers:
            refuse("recompute_method", "'uniform' with recompute_num_layers 1 recomputes every layer, and the model "
                                       "folder's config.json gives no num_hidden_layers to count them")
        return layers
    if not ((facts.get("recompute_options") or {}).get("partial") and method == "block" and count):
        return 0
    first = next((blocks for blocks in range(1, layers) if blocks == count), None)
    if granularity != "full" or first is None:
        refuse("recompute_method", f"'block' with recompute_granularity {granularity!r} and recompute_num_layers "
                                   f"{count!r}: the first N of the model's {layers} layers are read as `vramtune "
                                   "apply` writes them: recompute_granularity full and N below the layers (every "
                                   "layer: recompute_method uniform, recompute_num_layers 1)")
        return 0
    return first


def _stated_tensor_parallel(keys: dict[str, Any]) -> tuple[int, bool]:
    """tensor_model_parallel_size (above 1; -1, 1 or no key: none) and sequence_parallel (the reader has refused it
    without tensor parallelism)."""
    degree = keys.get("tensor_model_parallel_size")
    degree = degree if isinstance(degree, int) and not isinstance(degree, bool) and degree > 1 else 1
    return degree, degree > 1 and keys.get("sequence_parallel") is True


def _stated_stage(keys: dict[str, Any], devices: int, refuse: Refuse) -> int:
    """One rank holds nothing sharded: stage 0. Over several: sharding's stage (stage1 .. stage3, over
    sharding_parallel_size, the ranks), or none ("" or null)."""
    if devices < 2:
        return 0
    if "sharding" not in keys:
        refuse("sharding", f"{UNSTATED} (stage1, stage2, stage3, or \"\" for none over {devices} ranks)")
        return 0
    mode = keys["sharding"]
    if not mode:
        return 0
    stage = next((stage for stage in SHARDING_STAGES[1:] if mode == f"stage{stage}"), None)
    if stage is None:
        refuse("sharding", f"{mode!r}: not one stage (stage1, stage2 or stage3; \"\" for none), as `vramtune apply` "
                           "writes it")
    elif keys.get("sharding_parallel_size") != devices:
        refuse("sharding_parallel_size", f"{keys.get('sharding_parallel_size')!r}: the stage is measured over "
                                         f"{devices} ranks, which `vramtune apply` writes as sharding_parallel_size: "
                                         f"{devices}")
    return stage or 0
