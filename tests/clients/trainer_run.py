"""A PaddleNLP user's training script, as the llm scripts do it: the real client for vramtune's exported JSON.

    python tests/clients/trainer_run.py ARGS.json --steps 3

PaddleNLP's own Trainer trains a model built from `model_name_or_path` (a local folder with config.json; random
weights) on random token ids. As PaddleNLP's llm scripts do (llm/finetune_generation.py, 2.8.1), the model arguments
(recompute_granularity, no_recompute_layers) go on the model's config, the sequence length is max_length, prefix
tuning and then LoRA wrap the model (LoRA: the script's Llama target modules, alpha 2 x rank, merge_weights off);
every other key is a TrainingArguments field, parsed by PdArgumentParser. With do_eval, the Trainer evaluates after
the last step, inside its training loop (its training DataLoader still reading ahead), two batches of
per_device_eval_batch_size, keeping argmax predictions as the llm scripts' CausalLMTrainer does. Both data sets
hold READ_AHEAD batches more than the loop takes, so that their DataLoaders read ahead as on a real data set. Prints
one JSON line: the peak allocated bytes of the steps after the first optimizer step (when the optimizer state
exists), and of the evaluation, read from Paddle's allocator counters (on Paddle 2.6, which cannot reset them, the
process's peak; no evaluation peak of its own).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile

import numpy as np
import paddle
from paddle.base import core
from paddlenlp.trainer import PdArgumentParser, Trainer, TrainerCallback, TrainingArguments
from paddlenlp.transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

MODEL_KEYS = ("model_name_or_path", "recompute_granularity", "no_recompute_layers", "max_length", "lora", "lora_rank",
              "prefix_tuning", "num_prefix_tokens")
LLAMA_LORA_TARGETS = [".*q_proj.*", ".*v_proj.*", ".*k_proj.*", ".*o_proj.*", ".*qkv_proj.*", ".*gate_proj.*",
                      ".*down_proj.*", ".*up_proj.*", ".*gate_up_fused_proj.*"]  # the script's get_lora_target_modules


class RandomData(paddle.io.Dataset):
    def __init__(self, count: int, seq_len: int, vocab: int, classes: int | None):
        rng = np.random.default_rng(0)
        self.ids = rng.integers(1, vocab, size=(count, seq_len), dtype=np.int64)
        self.labels = (rng.integers(0, classes, size=count, dtype=np.int64) if classes else
                       rng.integers(1, vocab, size=(count, seq_len), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.labels[index]}


class ArgmaxTrainer(Trainer):
    """The llm scripts' CausalLMTrainer prediction step: the base step, then argmax predictions are kept."""

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        if logits is not None:
            logits = (logits[0] if isinstance(logits, (list, tuple)) else logits).argmax(axis=-1, keepdim=True)
        return loss, logits, labels


READ_AHEAD = 8  # batches beyond the loop's: the Trainer's DataLoader holds 5 ahead (Paddle 2.6's defaults, no workers)
EVALUATED = 2  # evaluation steps (max_evaluate_steps)

# Paddle 2.6 cannot reset the peak: there every peak is the process's since it started (as vramtune's probes are
# on 2.6), and evaluation's cannot be told apart from training's.
RESETS = hasattr(core, "host_memory_stat_reset_peak_value")


class Peak(TrainerCallback):
    """Reset the allocator's peak after the first optimizer step (where Paddle can), read it after the last; the
    evaluation's, which follows, from there."""

    def __init__(self) -> None:
        self.peak = self.eval_peak = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1 and RESETS:
            core.host_memory_stat_reset_peak_value("Allocated", 0)
        if state.global_step == args.max_steps:
            self.peak = int(core.host_memory_stat_peak_value("Allocated", 0))
            if RESETS:
                core.host_memory_stat_reset_peak_value("Allocated", 0)

    def on_evaluate(self, args, state, control, **kwargs):
        if RESETS:
            self.eval_peak = int(core.host_memory_stat_peak_value("Allocated", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arguments")
    parser.add_argument("--steps", type=int, default=3)
    options = parser.parse_args()
    with open(options.arguments, encoding="utf-8") as handle:
        arguments = json.load(handle)
    model_args = {key: arguments.pop(key) for key in MODEL_KEYS if key in arguments}
    evaluates = arguments.pop("do_eval", False)
    arguments.update(max_steps=options.steps, report_to="none", save_strategy="no", logging_strategy="no",
                     evaluation_strategy="steps" if evaluates else "no", eval_steps=options.steps,
                     max_evaluate_steps=EVALUATED, disable_tqdm=True, dataloader_num_workers=0,
                     output_dir=tempfile.mkdtemp(prefix="trainer-run-"), overwrite_output_dir=True)
    folder = tempfile.mkdtemp(prefix="trainer-args-")
    with open(os.path.join(folder, "args.json"), "w", encoding="utf-8") as handle:
        json.dump(arguments, handle)
    (training,) = PdArgumentParser(TrainingArguments).parse_json_file(os.path.join(folder, "args.json"))
    paddle.set_device(training.device)
    if training.recompute:
        # CPU stands in for a GPU here: Paddle 2.6 cannot keep the RNG state in recompute on CPU (it raises), so the
        # model recomputes without it, as vramtune's probe does there (on a GPU, and on Paddle 3, nothing changes).
        from vramtune.mechanisms.recompute.native import recompute_without_rng_state_where_it_cannot_be_kept

        recompute_without_rng_state_where_it_cannot_be_kept()

    config = AutoConfig.from_pretrained(model_args["model_name_or_path"])
    for key in ("recompute_granularity", "no_recompute_layers"):  # as the llm scripts copy ModelArgument fields
        if model_args.get(key) is not None:
            setattr(config, key, model_args[key])
    causal = any(a.endswith("ForCausalLM") for a in config.architectures or [])
    auto = AutoModelForCausalLM if causal else AutoModelForSequenceClassification
    model = auto.from_config(copy.deepcopy(config))
    if model_args.get("prefix_tuning"):
        from paddlenlp.peft import PrefixConfig, PrefixModelForCausalLM
        from paddlenlp.peft.prefix import llama_postprocess_past_key_value

        prefix = PrefixConfig(num_prefix_tokens=model_args.get("num_prefix_tokens", 128),
                              num_attention_heads=config.num_attention_heads,
                              num_hidden_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
                              dtype="float32")
        model = PrefixModelForCausalLM(model=model, prefix_config=prefix,
                                       postprocess_past_key_value=llama_postprocess_past_key_value)
    if model_args.get("lora"):
        from paddlenlp.peft import LoRAConfig, LoRAModel

        rank = model_args.get("lora_rank", 8)
        model = LoRAModel(model, LoRAConfig(target_modules=LLAMA_LORA_TARGETS, r=rank, lora_alpha=2 * rank,
                                            merge_weights=False, dtype="float32"))
    micro, labels = training.per_device_train_batch_size, None if causal else config.num_labels
    data = RandomData((options.steps * training.gradient_accumulation_steps + READ_AHEAD) * micro,
                      model_args["max_length"], config.vocab_size, labels)
    evaluation = RandomData((EVALUATED + READ_AHEAD) * training.per_device_eval_batch_size, model_args["max_length"],
                            config.vocab_size, labels) if evaluates else None
    peak = Peak()
    trainer = (ArgmaxTrainer if causal else Trainer)(model=model, args=training, train_dataset=data,
                                                     eval_dataset=evaluation, callbacks=[peak])
    trainer.train()
    last = int(core.host_memory_stat_peak_value("Allocated", 0))  # on Paddle 2.6 the process's
    print(json.dumps({"peak_bytes": peak.peak, "eval_peak_bytes": peak.eval_peak,
                      "whole_run_peak_bytes": max(last, peak.peak, peak.eval_peak or 0),
                      "micro_batch": micro, "accumulation": training.gradient_accumulation_steps,
                      "recompute": training.recompute}))


if __name__ == "__main__":
    sys.exit(main())
