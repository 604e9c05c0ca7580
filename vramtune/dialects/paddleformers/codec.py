"""PaddleFormers' memory keys <-> the Strategy's fields and the spec's keys, both ways: what a config says of
precision, sharding, to_static and evaluation, read into the spec (`from_formers`); the tuned values written back as
its keys (`to_formers`); the GPU-only settings a CPU probe replaces (`formers_on_cpu`); the keys the search decides,
left out of a probe's file (`FORMERS_KEYS`); what PaddleFormers takes when a key is left out (`FORMERS_DEFAULTS`);
what its model code does of recompute (`formers_facts`, `file_counts`). stated.py reads a file's strategy back
from the keys `to_formers` writes.

Keys are written in the order of the mechanisms they belong to: precision, the batch, recompute, sharding."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vramtune.core.reading import Section, positive, refuse_when_on
from vramtune.core.report import Tuned
from vramtune.core.strategy import AMP_PRECISIONS, SHARDING_STAGES, Facts, dtype_of, level_of
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.roundtrip import DELETE
from vramtune.dialects.trainer_keys import refuse_sharding_extras
from vramtune.memory.architecture import ArchitectureError, read_config

# what PaddleFormers (TrainingArguments, FinetuningArguments) takes when a config leaves these keys out
FORMERS_DEFAULTS: dict[str, Any] = {"compute_type": "bf16", "fp16_opt_level": "O1", "amp_master_grad": True,
                                    "sharding": "stage1"}
COMPUTE_TYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "float32"}  # a PaddleFormers compute_type per dtype
BATCH_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps")
# the one combination of the recompute keys PaddleFormers' own models honour: every layer
EVERY_LAYER = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
# PaddleFormers' own model code (importable here) recomputes every layer or none; the other models (paddlefleet's)
# take Megatron's block method, the first N layers (assumed from TrainingArguments' documentation: paddlefleet cannot
# be read here)
ALL_OR_NONE = ("llama", "ernie4_5", "ernie4_5_moe", "paddleocr_vl", "qwen2_5_vl", "ernie4_5_moe_vl")
FORMERS_KEYS = (*EVERY_LAYER, "recompute_modules")  # decided by the search: a probe leaves the file's values out
SHARDING_OFFLOAD = "sharding_offload_opt_buffersize_GB"
EVALUATION_STRATEGIES = ("no", "steps", "epoch")


# -- the file -> the spec ------------------------------------------------------------------------------------------
def from_formers(config: Section) -> dict[str, Any]:
    """What the file says of precision, sharding, to_static and evaluation, as dotted spec keys; problems recorded on
    the section, by the file's own key names."""
    return {**_precision(config), **_sharding(config), **_tensor_parallel(config), **_static(config),
            **_evaluation(config)}


def _precision(config: Section) -> dict[str, Any]:
    """compute_type says the half type (bf16 by default; float32: none; the quantized types refused: GPU kernels): the
    search keeps to it and chooses O1 or O2; amp_master_grad (on by default) and the custom op lists are measured as
    the Trainer applies them."""
    data, default = config.data, FORMERS_DEFAULTS["compute_type"]
    checked = config.get("compute_type", str, default, choices=(*COMPUTE_TYPES.values(), *keys.QUANTIZED_TYPES))
    if checked in keys.QUANTIZED_TYPES:
        config.fail("compute_type", f"{checked!r} quantizes the weights with GPU kernels; a probe would measure "
                                    f"unquantized weights: use {default} to tune, {keys.ESTIMATE}")
    half = data.get("compute_type", default)  # null: no half type named
    config.get("fp16_opt_level", str, FORMERS_DEFAULTS["fp16_opt_level"], choices=("O1", "O2"))
    read: dict[str, Any] = {}
    if half in ("bf16", "fp16"):
        read["search.precisions"] = [p for p in AMP_PRECISIONS if dtype_of(p) == half]
    if _given(config, "amp_master_grad", bool) and half in ("bf16", "fp16"):  # the Trainer ignores it without AMP
        read["train.amp_master_grad"] = True
    for name in ("black_list", "white_list"):
        ops = config.get(f"amp_custom_{name}", list, None)
        if ops:
            read[f"train.amp_custom_{name}"] = ops
    return read


def _given(config: Section, key: str, kind: type) -> Any:
    """A key as PaddleFormers takes it: left out, its default; null, None (off)."""
    return config.get(key, kind, FORMERS_DEFAULTS[key] if key not in config.data else None)


def _sharding(config: Section) -> dict[str, Any]:
    """sharding (stage1 by default) and its degree, sharding_parallel_size, which says how many ranks the run has (at
    least); offloading to the host and sharding_parallel_config's options are not measured: refused."""
    data = config.data
    config.seen.add(SHARDING_OFFLOAD)
    if isinstance(data.get(SHARDING_OFFLOAD), (int, float)) and data[SHARDING_OFFLOAD] > 0:
        config.fail(SHARDING_OFFLOAD, f"{data[SHARDING_OFFLOAD]!r} changes memory: offloading sharding's buffers is "
                                      "not measured: remove it")
    mode = _given(config, "sharding", str) or ""
    degree = config.get("sharding_parallel_size", int, -1)
    options = config.get("sharding_parallel_config", str, "") or ""
    refuse_sharding_extras(config, mode, options)
    return {"devices": degree} if degree and degree > 1 else {}


def _tensor_parallel(config: Section) -> dict[str, Any]:
    """tensor_model_parallel_size (PaddleFormers' default -1: none) and sequence_parallel: the layout a probe runs
    and the search keeps (the tensor-parallel mechanism reads them as `tensor_parallel` and `sequence_parallel`)."""
    degree = config.get("tensor_model_parallel_size", int, -1)
    sequence = config.get("sequence_parallel", bool, False)
    degree = degree if degree and degree > 1 else 1
    if sequence and degree < 2:
        config.fail("sequence_parallel", "true needs tensor parallelism: set tensor_model_parallel_size above 1 (or "
                                         "sequence_parallel: false)")
        return {}
    return {**({"tensor_parallel": degree} if degree > 1 else {}), **({"sequence_parallel": True} if sequence else {})}


def _static(config: Section) -> dict[str, Any]:
    """The Trainer converts with its own to_static key (refused when on: not measured), so vramtune's is not searched
    either."""
    refuse_when_on(config, "to_static", "the Trainer's to_static conversion is not measured (vramtune measures "
                                        "eager): set it to false to tune")
    return {"search.to_static": "off"}


def _evaluation(config: Section) -> dict[str, Any]:
    """The Trainer evaluates when do_eval is set or its evaluation strategy is not "no" (its keys as PaddleNLP's
    Trainer names them); generation while evaluating is refused (not measured)."""
    refuse_when_on(config, "eval_with_do_generation", "generation during evaluation (a KV cache per sequence) is not "
                                                      "measured: set it to false")
    evaluates = bool(config.get("do_eval", bool, False))
    strategy = config.get("evaluation_strategy", str, "no", choices=EVALUATION_STRATEGIES)
    batch = config.get("per_device_eval_batch_size", int, 8, check=positive(1 << 20))
    steps = config.get("eval_accumulation_steps", int, None, check=positive(1 << 20))
    loss_only = config.get("prediction_loss_only", bool, False)
    if not (evaluates or strategy not in (None, "no")):
        return {}
    return {"train.evaluation": {"batch": batch or 8, "keep": "loss" if loss_only else "predictions",
                                 **({"accumulation_steps": steps} if steps else {})}}


# -- the tuned values -> the file ----------------------------------------------------------------------------------
def to_formers(config: dict[str, Any], tuned: Tuned) -> dict[str, Any]:
    """The keys of the user's config that say the tuned values, and their values (`roundtrip.DELETE` removes a key);
    `apply` writes those that differ from the file."""
    return {**_precision_keys(tuned), **batch_keys(tuned), **_recompute_keys(config, tuned),
            **_sharding_keys(config, tuned), **_tensor_parallel_keys(config, tuned)}


def _precision_keys(tuned: Tuned) -> dict[str, Any]:
    """On a GPU, compute_type and fp16_opt_level as chosen (a CPU probe's fp32 says nothing of the GPU's)."""
    if tuned.device_kind == "cpu":
        return {}
    precision = tuned.strategy.precision
    return {"compute_type": COMPUTE_TYPES[dtype_of(precision)],
            **({"fp16_opt_level": level_of(precision)} if precision != "fp32" else {})}


def batch_keys(tuned: Tuned) -> dict[str, Any]:
    """The micro-batch and the accumulation, per device."""
    return dict(zip(BATCH_KEYS, (tuned.strategy.micro_batch, tuned.strategy.accumulation)))


def _recompute_keys(config: dict[str, Any], tuned: Tuned) -> dict[str, Any]:
    """Every layer when the choice recomputes (the only combination PaddleFormers' own models honour, so the search
    explores nothing else there), or the first N layers by the block method where the model's code recomputes those
    (the estimate's paddlefleet models: `formers_facts`); the file's combination removed when it recomputes nothing
    (and where the model recomputes the first N, a block method's)."""
    recomputed, facts = tuned.strategy.recomputed_blocks, tuned.facts
    partial = (facts.get("recompute_options") or {}).get("partial")
    if recomputed and partial and recomputed < facts.get("total_blocks", 0):
        return {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": recomputed}
    if recomputed:
        return dict(EVERY_LAYER)
    first_n = partial and config.get("recompute_method") == "block" and config.get("recompute_num_layers")
    if first_n or all(config.get(key) == value for key, value in EVERY_LAYER.items()):
        return dict.fromkeys(EVERY_LAYER, DELETE)
    return {}


def _sharding_keys(config: dict[str, Any], tuned: Tuned) -> dict[str, Any]:
    """The stage chosen over the ranks; PaddleFormers' default (stage1 over every rank) turned off where the choice
    is no sharding on several ranks. One rank writes nothing: sharding then holds nothing."""
    stage, ranks = tuned.strategy.sharding_stage, tuned.strategy.devices
    if stage:
        return {"sharding": f"stage{stage}", "sharding_parallel_size": ranks}
    return {"sharding": ""} if ranks > 1 and config.get("sharding", FORMERS_DEFAULTS["sharding"]) else {}


def _tensor_parallel_keys(config: dict[str, Any], tuned: Tuned) -> dict[str, Any]:
    """The tensor-parallel degree and sequence parallelism measured (the file's own: the search keeps them); none
    where the file runs without (its own spelling of that, -1 or 1 or no key, kept)."""
    strategy = tuned.strategy
    if strategy.tensor_parallel < 2:
        return {}
    sequence = {"sequence_parallel": True} if strategy.sequence_parallel else \
        ({"sequence_parallel": False} if "sequence_parallel" in config else {})
    return {"tensor_model_parallel_size": strategy.tensor_parallel, **sequence}


def formers_on_cpu(arguments: dict[str, Any]) -> dict[str, Any]:
    """The file's GPU-only precision and sharding and the CPU equivalents a probe on CPU runs instead (said in the
    report, never written back): float32, and no sharding (one rank holds nothing sharded)."""
    cpu = COMPUTE_TYPES["fp32"]
    return {**({"compute_type": cpu} if arguments.get("compute_type", FORMERS_DEFAULTS["compute_type"]) != cpu else {}),
            **({"sharding": ""} if arguments.get("sharding", FORMERS_DEFAULTS["sharding"]) else {})}


# -- the model's code -----------------------------------------------------------------------------------------------
def formers_facts(model_type: str) -> Facts:
    """What PaddleFormers' code does of recompute for a model known by its model_type alone (no probe ran): its own
    models recompute every layer or none; the paddlefleet ones the first N layers too."""
    return {"recompute_options": {"granularities": ["full"], "partial": model_type not in ALL_OR_NONE}}


def file_counts(layers: int, model_type: str) -> tuple[Facts, dict[str, tuple[Any, ...]]]:
    """What a file may state of the count fields, for a model of these layers and model_type (its config.json; 0 and
    "" where unknown): the facts a probe records, for the writer, and each count field's values other than the
    default. The probe's blocks are the model's layers (num_hidden_layers): every one of them where the model's code
    recomputes every layer or none (`to_formers` writes the same keys for any count there), else 1..L (the first N
    by the block method, L every layer); every sharding stage (the file's ranks are the spec's)."""
    facts: Facts = {}
    counts: dict[str, tuple[Any, ...]] = {}
    if layers:
        facts = {"total_blocks": layers, **formers_facts(model_type)}
        partial = facts["recompute_options"]["partial"]
        counts["recomputed_blocks"] = tuple(range(1, layers + 1) if partial else range(layers, layers + 1))
    counts["sharding_stage"] = SHARDING_STAGES[1:]
    return facts, counts


def model_depth(folder: str) -> tuple[int, str]:
    """The layers (num_hidden_layers, as a probe counts its blocks) and model_type of the model folder's config.json;
    0 and "" where it cannot be read."""
    try:
        config = read_config(Path(folder))
    except ArchitectureError:
        config = {}
    return int(config.get("num_hidden_layers") or 0), str(config.get("model_type") or "")
