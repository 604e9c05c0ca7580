"""The keys of a PaddleNLP arguments file: every name PaddleNLP 2.8.1's parsers accept (TrainingArguments, and the llm
fine-tuning scripts' own: their TrainingArguments subclass's fields and their model, data, quantization and generation
arguments), and those that change memory or what is trained. A key that changes memory is read by vramtune (the
arguments reader or a mechanism's `from_arguments`) or refused by name with what to do; it is never ignored. The
table in docs/paddlenlp.md says what happens to each.
"""
from __future__ import annotations

from typing import Any, Callable

from vramtune.core.reading import switched_on as _on  # a flag switched on, as the tools read it

TRAINING_ARGUMENTS = (
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "do_export", "evaluation_strategy",
    "prediction_loss_only", "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
    "eval_accumulation_steps", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
    "max_grad_norm", "num_train_epochs", "max_steps", "lr_scheduler_type", "warmup_ratio", "warmup_steps", "num_cycles",
    "lr_end", "power", "log_on_each_node", "logging_dir", "logging_strategy", "logging_first_step", "logging_steps",
    "save_strategy", "save_steps", "save_total_limit", "save_on_each_node", "no_cuda", "seed", "bf16", "fp16",
    "fp16_opt_level", "amp_master_grad", "bf16_full_eval", "fp16_full_eval", "amp_custom_black_list",
    "amp_custom_white_list", "sharding", "sharding_degree", "sharding_parallel_degree", "save_sharded_model",
    "load_sharded_model", "tensor_parallel_degree", "pipeline_parallel_degree", "sep_parallel_degree",
    "data_parallel_config", "tensor_parallel_config", "pipeline_parallel_config", "sharding_parallel_config",
    "hybrid_parallel_topo_order", "recompute", "scale_loss", "minimum_eval_times", "local_rank",
    "dataloader_drop_last", "eval_steps", "max_evaluate_steps", "dataloader_num_workers", "past_index", "run_name",
    "device", "disable_tqdm", "remove_unused_columns", "label_names", "load_best_model_at_end",
    "metric_for_best_model", "greater_is_better", "ignore_data_skip", "optim", "report_to", "wandb_api_key",
    "resume_from_checkpoint", "skip_memory_metrics", "flatten_param_grads", "lazy_data_processing",
    "skip_profile_timer", "distributed_dataloader", "unified_checkpoint", "to_static", "unified_checkpoint_config",
    "ignore_load_lr_and_optim", "ignore_save_lr_and_optim", "force_reshard_pp", "enable_auto_parallel",
    "use_expert_parallel",
)
# the fields the llm scripts' TrainingArguments subclass adds (llm/utils/argument.py): not PdArgumentParser's own
LLM_TRAINING_ARGUMENTS = ("benchmark", "autotuner_benchmark", "decay_steps", "tensor_parallel_output")
MODEL_ARGUMENTS = (
    "model_name_or_path", "use_flash_attention", "tokenizer_name_or_path", "use_fused_rms_norm", "fuse_attention_qkv",
    "fuse_attention_ffn", "recompute_granularity", "virtual_pp_degree", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "continue_training", "sequence_parallel", "fuse_sequence_parallel_allreduce",
    "use_fused_rope", "no_recompute_layers", "pp_recompute_interval", "recompute_use_reentrant",
    "weight_quantize_algo", "weight_blocksize", "weight_double_quant", "weight_double_quant_block_size", "lora",
    "lora_path", "lora_rank", "use_quick_lora", "rslora", "lora_plus_scale", "pissa", "prefix_tuning", "prefix_path",
    "num_prefix_tokens", "from_aistudio", "save_to_aistudio", "aistudio_repo_id", "aistudio_repo_private",
    "aistudio_repo_license", "aistudio_token", "neftune", "neftune_noise_alpha",
)
DATA_ARGUMENTS = (
    "dataset_name_or_path", "task_name", "zero_padding", "pad_to_multiple_of", "src_length", "max_length",
    "eval_with_do_generation", "save_generation_output", "lazy", "chat_template", "task_name_or_path", "intokens",
    "tgt_length", "max_seq_length",  # older llm scripts (src + tgt) and the Trainer examples
)
QUANT_ARGUMENTS = (
    "quant_type", "do_qat", "do_ptq", "ptq_step", "weight_quant_method", "shift", "shift_all_linears", "shift_sampler",
    "shift_step", "smooth", "smooth_all_linears", "smooth_sampler", "smooth_step", "smooth_piecewise_search",
    "smooth_k_piece", "smooth_search_piece", "do_gptq", "gptq_step", "do_awq", "auto_clip", "awq_step",
    "autoclip_step",
)
GENERATE_ARGUMENTS = ("top_k", "top_p")
KNOWN = frozenset(TRAINING_ARGUMENTS + LLM_TRAINING_ARGUMENTS + MODEL_ARGUMENTS + DATA_ARGUMENTS + QUANT_ARGUMENTS
                  + GENERATE_ARGUMENTS)


def _above_one(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1


ESTIMATE = "or estimate it without measuring: vramtune estimate"
# key -> (whether its value changes memory, what to do when vramtune does not read it). A key read by vramtune (the
# arguments reader, or a mechanism's from_arguments) is measured; one listed here and not read is refused.
MEMORY: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tensor_parallel_degree": (_above_one, "tensor parallelism runs on GPUs only and vramtune does not measure it: "
                               f"set it to 1 to tune the data-parallel part, {ESTIMATE}"),
    "pipeline_parallel_degree": (_above_one, "pipeline parallelism runs on GPUs only and vramtune does not measure "
                                 f"it: set it to 1 to tune the data-parallel part, {ESTIMATE}"),
    "sep_parallel_degree": (_above_one, "sep (sequence) parallelism runs on GPUs only and vramtune does not measure "
                            f"it: set it to 1, {ESTIMATE}"),
    "virtual_pp_degree": (_above_one, "needs pipeline parallelism, which vramtune does not measure: set it to 1"),
    "sequence_parallel": (_on, "needs tensor parallelism, which vramtune does not measure: set it to false"),
    "weight_quantize_algo": (_on, "quantized weights are built by PaddleNLP's from_pretrained only (GPU kernels); a "
                             "probe would measure unquantized weights: remove the key to tune without quantization, "
                             f"{ESTIMATE}"),
    "do_qat": (_on, "quantization-aware training changes the model; vramtune does not measure it: set it to false"),
    "flatten_param_grads": (_on, "flattened parameter and gradient buffers are not measured: set it to false"),
    "use_expert_parallel": (_on, "expert parallelism is not measured: set it to false"),
    "enable_auto_parallel": (_on, "auto parallel is not measured: set it to false"),
    "zero_padding": (_on, "zero padding's packed attention masks are not measured: set it to false"),
    "intokens": (_on, "intokens (zero padding) is not measured: set it to false"),
}


def refusal(key: str, value: Any) -> str | None:
    """Why a key vramtune did not read cannot be kept as it is, or None."""
    changes, what_to_do = MEMORY.get(key, (None, ""))
    if changes is not None and changes(value):
        return f"{value!r} changes memory: {what_to_do}"
    return None
