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
VL_NOT_PROBED = ("{why}: vramtune estimate {file} --card SIZE estimates it from the model's config.json (vision "
                 "tower, aligner, language model, image tokens at the resolution cap)")
VL_PROBED = ("paddleocr_vl",)  # the VL models a probe builds (PaddleFormers' VL-SFT workflow runs them on a CPU)


# on a CPU, the vision tower's attention: "linear" (what a GPU's flash kernel holds: vl_attention.py) unless this
# environment variable says "eager" (the CPU's own P x P scores, as PaddleFormers' workflow holds them on a CPU)
VL_CPU_ATTENTION = "VRAMTUNE_VL_CPU_ATTENTION"


VL_NOT_VERIFIED = ("the workflow is not run on a CPU for VL-SFT yet: it would hold the vision tower's eager P x P "
                   "scores and augment at random, where the probe holds the attention as flashmask does and measures "
                   "augmentation's worst case (docs/paddleformers.md)")


def vl_attention_note(device_kind: str, setting: str | None) -> str:
    """How a VL probe's vision tower held its attention, in words."""
    if device_kind != "cpu":
        return "the vision tower's attention: the file's own kernel, measured"
    if setting == "eager":
        return ("the vision tower's attention: eager, measured with the CPU's own heads x P x P scores "
                f"({VL_CPU_ATTENTION}=eager, as PaddleFormers' workflow holds them on a CPU): not what a GPU's "
                "flashmask holds")
    return ("the vision tower's attention: a linear-memory attention (flash's algorithm in Paddle) holding what a "
            "GPU's flashmask holds (query, key, value, output, log-sum-exp per row), not the CPU's heads x P x P "
            "scores, plus a transient block of heads x 128 x P scores; the language model's attention runs eager, "
            "its heads x T x T scores measured as a CPU holds them")


def vl_refusal(stage: str, model_type: str | None, has_data: bool, packing: bool) -> str | None:
    """Why a vision-language run is not probed, or None: PaddleOCR-VL's VL-SFT on its own data, unpacked, is."""
    if stage != "VL-SFT":
        return f"probing {stage} is not supported yet (VL-SFT of PaddleOCR-VL is)"
    if model_type not in VL_PROBED:
        return (f"probing VL-SFT of {model_type or 'this model'} is not supported yet (PaddleOCR-VL's is: "
                "Qwen2.5-VL's template and the others are not measured here)")
    if not has_data:
        return ("VL-SFT is measured on the training data's worst row (its images through the template and the "
                "processor): train_dataset_path must name data that is there")
    if packing:
        return "probing VL-SFT with packing or padding_free is not supported yet (a packed row's images are not read)"
    return None
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
