"""What vramtune does with each PaddleFormers key that changes memory (docs/paddleformers.md has the whole table).

Every key of the file is one of: measured (the search decides it and `apply` writes it: batch, accumulation,
recompute), set on the model as the workflow sets it (LoRA, stage, max_seq_len, packing, attention, the model
folder), mapped onto a vramtune mechanism (precision, sharding, evaluation), replaced by its CPU equivalent for a
probe on CPU (never in the file written back), or refused here by name with what to do. Keys that do not change
memory (paths, logging, saving, schedules) are kept as they are.
"""
from __future__ import annotations

from typing import Any, Callable

from vramtune.core.reading import switched_on as _on  # a flag switched on, as the tools read it

ESTIMATE = "or estimate it without measuring: vramtune estimate"
# the parallel keys `vramtune estimate` reads as the file's layout (layout.py)
LAYOUT = ("not probed on this machine yet (multi-rank probes are a later step): `vramtune estimate FILE` reads it and "
          "predicts the file's layout per rank and pipeline stage; set it to {off} to tune the rest")


def _above_one(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1

# key -> (whether its value changes memory in a way vramtune does not measure, what to do)
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pipeline_model_parallel_size": (_above_one, "pipeline parallelism is " + LAYOUT.format(off=1)),
    "virtual_pipeline_model_parallel_size": (_above_one, "interleaved pipeline parallelism is "
                                             + LAYOUT.format(off=1)),
    "context_parallel_size": (_above_one, f"context parallelism is not measured: set it to 1, {ESTIMATE}"),
    "sep_parallel_size": (_above_one, f"sep (sequence) parallelism is not measured: set it to 1, {ESTIMATE}"),
    "expert_model_parallel_size": (_above_one, "expert parallelism is " + LAYOUT.format(off=1)),
    "use_expert_parallel": (_on, "expert parallelism is " + LAYOUT.format(off="false")),
    "enable_auto_parallel": (_on, "auto parallel is not measured: set it to false"),
    "weight_quantize_algo": (_on, "quantized weights need GPU kernels; a probe would measure unquantized weights: "
                             f"remove the key to tune without quantization, {ESTIMATE}"),
    "fp8": (_on, f"FP8 training needs GPU kernels and is not measured: remove it, {ESTIMATE}"),
    "neftune": (_on, "NEFTune's noise hook is not measured: set it to false to tune"),
    "lora_path": (_on, "an adapter saved before is loaded with its weights; vramtune never loads weights: remove "
                  "lora_path to tune a fresh adapter of lora_rank"),
    "num_nextn_predict_layers": (_above_one, "multi-token prediction layers are not measured: set it to 0"),
    "pre_alloc_memory": (_on, "a pre-allocated block is not measured: set it to 0"),
    "tensorwise_offload_optimizer": (_on, "offloading the optimizer to the host is neither measured nor estimated: "
                                     "set it to false"),
    "offload_fp8_expert_master_weight": (_on, "offloading is neither measured nor estimated: set it to false"),
    "use_fused_linear_cross_entropy": (_on, "the fused linear cross entropy kernel is not measured: set it to false"),
    "fuse_optimizer_states": (_on, "fused optimizer states are not measured: set it to false"),
}
# compute_type values that quantize weights (GPU kernels only): refused by the precision mechanism, which reads the key
QUANTIZED_TYPES = ("wint4", "wint8", "wint4/8", "nf4")
STAGES = ("SFT", "PT", "DPO")  # what a probe builds; the others (pretraining recipes) are refused by name
VL_STAGES = ("VL-SFT", "VL-DPO")  # vision-language fine-tuning: read, validated and estimated from config.json
READ_STAGES = STAGES + VL_STAGES
VL_NOT_PROBED = ("probing vision-language fine-tuning is not supported yet: vramtune estimate {file} --card SIZE "
                 "estimates it from the model's config.json (vision tower, aligner, language model, image tokens at "
                 "the resolution cap)")
# keys PaddleFormers 1.2 parses but never hands to the VL workflow (cli/train/tuner.py passes no preprocessing
# arguments to run_sft or run_dpo): the template resizes to its own cap whatever they say
UNREACHED_VL = ("max_pixels", "min_pixels", "video_max_pixels", "video_min_pixels")


def unreached(config: dict[str, Any]) -> list[str]:
    """What a VL stage's file sets that its workflow never gets, in words."""
    if config.get("stage") not in VL_STAGES:
        return []
    return [f"{key}: {config[key]!r} does not reach PaddleFormers 1.2's {config['stage']} workflow (its parser reads "
            "it, the workflow never gets it): images are resized to the template's own cap"
            for key in UNREACHED_VL if config.get(key) is not None]
# kernels with no CPU implementation: a CPU probe runs the plain equivalent (the file keeps its setting)
CPU_ATTENTION = "eager"
FUSED_CONFIG_FIELDS = ("fuse_rms_norm", "use_fused_rms_norm", "use_fused_rope", "fuse_swiglu", "fuse_attention_qkv",
                       "fuse_attention_ffn", "use_fused_head_and_loss_fn")


def refusal(key: str, value: Any) -> str | None:
    """Why a key's value cannot be tuned as it is, or None."""
    changes, what_to_do = REFUSED.get(key, (None, ""))
    return f"{value!r} changes memory: {what_to_do}" if changes is not None and changes(value) else None
