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
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramtune.core.reading import positive
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.codec import FORMERS_KEYS, formers_on_cpu
from vramtune.sources.base import BuildError, BuiltModel, Source

# imports that need paddlefleet (not on PyPI): the architectures PaddleFormers 1.2 builds through it
FLEET_HINT = "paddlefleet"
SCRATCH = "vramtune-formers-output"  # the output_dir a probe parses with (nothing is written there)


@dataclass
class FormersModel:
    folder: str  # the local model folder (config.json; weights are never read)
    arguments: dict[str, Any]  # the file's keys, as given (with the command line's key=value)
    stage: str = "SFT"
    seq_len: int = 4096  # the length measured: max_seq_len, or the longest sample kept (no packing)
    seq_note: str = ""  # how seq_len was found (said in the report)
    datasets: list[str] = field(default_factory=list)

    @property
    def packing(self) -> bool:
        return bool(self.arguments.get("packing")) or bool(self.arguments.get("padding_free"))


def cpu_equivalents(arguments: dict[str, Any]) -> dict[str, Any]:
    """The file's GPU-only settings and their CPU equivalents for a probe on CPU (never written back)."""
    changes = formers_on_cpu(arguments)
    if arguments.get("_attn_implementation", "flashmask") != keys.CPU_ATTENTION:
        changes["_attn_implementation"] = keys.CPU_ATTENTION
    return changes


class Formers(Source):
    name = "paddleformers"
    settings = FormersModel
    modules = ("paddleformers.cli.hparams", "paddleformers.cli.train.sft.workflow")

    def read(self, model, data):
        folder = model.get("folder", str)
        arguments = model.get("arguments", dict)
        stage = model.get("stage", str, "SFT", choices=keys.STAGES)
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

    def notes(self, settings: FormersModel, device_kind: str) -> list[str]:
        notes = [settings.seq_note]
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


def probe_arguments(settings: FormersModel, device_kind: str) -> dict[str, Any]:
    """The file's arguments as a probe parses them: the model folder absolute, the keys the search decides left out
    (codec.py's `FORMERS_KEYS`), CPU equivalents on CPU, outputs in a scratch folder."""
    arguments = {key: value for key, value in settings.arguments.items() if key not in FORMERS_KEYS}
    arguments.update(model_name_or_path=settings.folder, output_dir=str(Path(tempfile.gettempdir()) / SCRATCH),
                     logging_dir=None, do_train=True)
    if device_kind == "cpu":
        arguments.update(cpu_equivalents(settings.arguments), device="cpu", amp_master_grad=False)
    return {key: value for key, value in arguments.items() if value is not None}


def architecture_error(folder: str, error: Exception) -> BuildError:
    """A model PaddleFormers cannot build here, said with why (paddlefleet: not on PyPI)."""
    text = f"{type(error).__name__}: {error}"
    if FLEET_HINT in text:
        return BuildError(f"model_name_or_path: {folder}: PaddleFormers builds this architecture through paddlefleet, "
                          "which is not on PyPI (nor on this machine): vramtune cannot probe it here; estimate it "
                          "without measuring: vramtune estimate")
    return BuildError(f"model_name_or_path: {folder}: PaddleFormers cannot build it: {text[:300]}")


__all__ = ["BuiltModel", "Formers", "FormersModel", "architecture_error", "cpu_equivalents", "probe_arguments"]
SOURCE = Formers()
