"""PaddleFormers 1.x models, built in the child as `paddleformers-cli train`'s workflow builds them.

The file's own arguments are parsed by PaddleFormers' parser (get_train_args: its checks run); the configuration is
read from the local model folder and set up as the SFT workflow does (LlmMetaConfig.set_llm_config, the sequence
length, the attention implementation, dropout), the model made with random weights (from_config: the workflow's
`continue_training: false`), and LoRA applied by the workflow's own create_peft_model (PaddleFormers' target
modules for the model type, alpha 2 x rank). Recompute is set on the configuration by the recompute mechanism as the
workflow's keys set it (granularity full, method uniform, one layer per unit: every layer).

A batch is what PaddleFormers' collate_fn makes of samples of the measured length: every row as long as the
longest sample the workflow keeps (it pads a batch to its longest row), or max_seq_len with packing. The step is
vramtune's StepRunner, not the Trainer: the Trainer's accumulation calls paddle.device.synchronize(), which raises
on CPU, and the search varies what the Trainer would need a new process for. tests/formers/ checks the workflow's
own peak against the probe's.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from vramtune.core.reading import positive
from vramtune.core.strategy import dtype_of
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.model import FormersModel, cpu_equivalents
from vramtune.sources.base import Source

# PaddleFormers' attention implementations that call Paddle's flash kernels (nn/attention/flashmask_attention.py:
# flashmask_attention, or flash_attn where no mask is given): Paddle registers both on a GPU for float16 and bfloat16
# only (flash_attn_kernel.cu), and neither PaddleFormers nor Paddle falls back for float32 ("sdpa" does, on Paddle 3)
FLASH_ATTENTION = ("flashmask",)
FP32_FLASH = ("flashmask attention has GPU kernels for float16 and bfloat16 only (Paddle registers flash_attn and "
              "flashmask_attention for those): fp32 cannot run it; to measure fp32, set _attn_implementation: sdpa "
              "(or eager)")


class Formers(Source):
    name = "paddleformers"
    settings = FormersModel
    modules = ("paddleformers.cli.hparams", "paddleformers.cli.train.sft.workflow")
    o2_built_in_half = True  # the SFT and DPO workflows: dtype = bfloat16/float16 when fp16_opt_level is O2

    def read(self, model, data):
        folder = model.get("folder", str)
        arguments = model.get("arguments", dict)
        stage = model.get("stage", str, "SFT", choices=keys.READ_STAGES)
        datasets = model.get("datasets", list, []) or []
        seq_len = data.get("seq_len", int, check=positive(1 << 20))
        seq_note = data.get("seq_note", str, "") or ""
        if None in (folder, arguments, seq_len):
            return None
        if not seq_note:
            seq_note = (f"sequence length {seq_len}: max_seq_len, with packing" if arguments.get("packing") else
                        f"sequence length {seq_len}: max_seq_len, an upper bound (the training data is not there "
                        "to find its longest sample)")
        return FormersModel(folder, arguments, stage, seq_len, seq_note, datasets)

    def model_shape(self, settings: FormersModel) -> tuple[str, int, str]:
        return settings.folder, settings.seq_len, str(settings.arguments.get("_attn_implementation", "flashmask"))

    def notes(self, settings: FormersModel, device_kind: str) -> list[str]:
        notes = [settings.seq_note]
        if settings.stage in keys.VL_STAGES:
            notes.append(keys.vl_attention_note(device_kind, os.environ.get(keys.VL_CPU_ATTENTION)))
        if settings.arguments.get("continue_training", True):
            notes.append("continue_training: the workflow loads the folder's weights; probes build the same model with "
                         "random weights (the same bytes; weights are never read)")
        if device_kind == "cpu":
            changed = cpu_equivalents(settings.arguments)
            if changed:
                notes.append("probed on CPU with the CPU equivalents of " + ", ".join(
                    f"{key}: {settings.arguments.get(key, '(default)')!r} -> {value!r}"
                    for key, value in changed.items()) + "; fused kernels off; the file keeps its own settings")
        return notes

    def measured_notes(self, settings: FormersModel, device_kind: str) -> list[str]:
        """A VL stage's worst row, and how its vision tower's attention was held."""
        if settings.stage not in keys.VL_STAGES:
            return []
        return [settings.seq_note, keys.vl_attention_note(device_kind, os.environ.get(keys.VL_CPU_ATTENTION))]

    def refusal(self, settings: FormersModel, file: str) -> str | None:
        """A vision-language stage other than PaddleOCR-VL's VL-SFT on its own data, unpacked: validated and
        estimated, not probed in this version."""
        if settings.stage not in keys.VL_STAGES:
            return None
        try:
            model_type = json.loads((Path(settings.folder) / "config.json").read_text(encoding="utf-8")).get(
                "model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None
        why = keys.vl_refusal(settings.stage, model_type, bool(settings.datasets), settings.packing)
        return keys.VL_NOT_PROBED.format(file=file, why=why) if why else None

    def unsupported(self, settings: FormersModel, strategy, device) -> str | None:
        """fp32 with flash attention on a GPU (a CPU probe runs the eager equivalent)."""
        attention = settings.arguments.get("_attn_implementation", "flashmask")
        if device.kind == "gpu" and dtype_of(strategy.precision) == "fp32" and attention in FLASH_ATTENTION:
            return FP32_FLASH
        return None

    def identity(self, settings: FormersModel, spec_dir: str) -> dict[str, Any]:
        from importlib import metadata

        try:
            version = metadata.version("paddleformers")
        except metadata.PackageNotFoundError:
            version = None
        config_json = (Path(settings.folder) / "config.json").read_bytes()
        return {"paddleformers": version, "config_json": hashlib.sha256(config_json).hexdigest()[:16]}

    def build(self, settings: FormersModel, spec_dir: str, configure):
        from vramtune.dialects.paddleformers import building

        return building.build(settings, configure)


SOURCE = Formers()
