"""A PaddleFormers model as a probe takes it, Paddle-free: the settings the spec keeps (the model folder, the file's
arguments, the sequence length measured), the arguments a probe parses (the keys the search decides left out, the CPU
equivalents of GPU-only settings on a CPU), PaddleFormers' own parsing of them, and what a model it cannot build
says. Shared by the source (source.py), the child's building (building.py) and the data pass (lengths.py)."""
from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramtune.core.errors import BuildError
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.codec import FORMERS_KEYS, formers_on_cpu

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

    @property
    def padded_to_max(self) -> bool:
        """Whether the workflow pads every row to max_seq_len: packing, or sequence parallelism (run_sft's
        `max_seq_len = data_args.max_seq_len if packing or sequence_parallel ...`: the sequence is split over the
        tensor-parallel ranks at a fixed length)."""
        return self.packing or self.arguments.get("sequence_parallel") is True


def cpu_equivalents(arguments: dict[str, Any]) -> dict[str, Any]:
    """The file's GPU-only settings and their CPU equivalents for a probe on CPU (never written back)."""
    changes = formers_on_cpu(arguments)
    if arguments.get("_attn_implementation", "flashmask") != keys.CPU_ATTENTION:
        changes["_attn_implementation"] = keys.CPU_ATTENTION
    return changes


def probe_arguments(settings: FormersModel, device_kind: str) -> dict[str, Any]:
    """The file's arguments as a probe parses them: the model folder absolute, the keys the search decides left out
    (codec.py's `FORMERS_KEYS`), CPU equivalents on CPU, outputs in a scratch folder."""
    arguments = {key: value for key, value in settings.arguments.items() if key not in FORMERS_KEYS}
    arguments.update(model_name_or_path=settings.folder, output_dir=str(Path(tempfile.gettempdir()) / SCRATCH),
                     logging_dir=None, do_train=True)
    if device_kind == "cpu":
        arguments.update(cpu_equivalents(settings.arguments), device="cpu", amp_master_grad=False)
    return {key: value for key, value in arguments.items() if value is not None}


def dataset_config(model_args: Any, data_args: Any, training_args: Any, tokenizer: Any) -> dict[str, Any]:
    """The dataset settings the SFT and DPO workflows pass to create_dataset (cli/train/*/workflow.py), for one
    pass in order on one rank."""
    config = {"tokenizer": tokenizer, "processor": None, "max_seq_len": data_args.max_seq_len,
              "random_seed": training_args.seed, "num_replicas": 1, "rank": 0,
              "num_samples_each_epoch": data_args.num_samples_each_epoch, "random_shuffle": False,
              "greedy_intokens": data_args.greedy_intokens, "packing": False, "mix_strategy": data_args.mix_strategy,
              "encode_one_turn": data_args.encode_one_turn, "use_template": data_args.use_template,
              "is_pretraining": "pt" in model_args.stage.lower(), "truncate_packing": data_args.truncate_packing,
              "stage": model_args.stage, "template_backend": data_args.template_backend,
              "split_multi_turn": data_args.split_multi_turn, "dataset_type": "iterable", "dtype": "float32",
              "dataset_num_proc": 1, "binpacking": False, "packing_interval": data_args.packing_interval,
              "packed_idx_cache_dir": None, "dataloader_num_workers": 0, "template": data_args.template,
              "tool_format": None, "default_system": None, "truncation_strategy": data_args.truncation_strategy,
              "skip_warmup": data_args.skip_warmup}
    if model_args.stage == "DPO":
        config.update(max_prompt_len=data_args.max_prompt_len, buffer_size=data_args.buffer_size,
                      use_attn_mask_startend_row_indices=model_args.use_attn_mask_startend_row_indices,
                      use_filtered_label_loss=getattr(training_args, "use_filtered_label_loss", False),
                      enable_thinking=True)
    return config


def kept_sequences(data_args: Any, config: dict[str, Any]) -> Iterator[Any]:
    """Child side: every sequence the workflow's own dataset keeps, one pass in order (`config`: dataset_config's,
    with its template)."""
    from paddleformers.datasets.loader import create_dataset

    dataset = create_dataset(task_group=data_args.train_dataset_path, task_group_prob=data_args.train_dataset_prob,
                             sub_dataset_type=data_args.train_dataset_type, is_valid=True, **config)
    previous = None
    for batch in dataset:
        if batch is previous:  # its iterator yields its last batch twice
            continue
        previous = batch
        yield from batch


def architecture_error(folder: str, error: Exception) -> BuildError:
    """A model PaddleFormers cannot build here, said with why (paddlefleet: not on PyPI)."""
    text = f"{type(error).__name__}: {error}"
    if FLEET_HINT in text:
        return BuildError(f"model_name_or_path: {folder}: PaddleFormers builds this architecture through paddlefleet, "
                          "which is not on PyPI (nor on this machine): vramtune cannot probe it here; estimate it "
                          "without measuring: vramtune estimate")
    if isinstance(error, NameError) and "'triton'" in str(error):
        return BuildError(f"model_name_or_path: {folder}: PaddleFormers cannot build it: {text}: its module imports "
                          "the triton package (its GPU kernels, never called on a CPU): pip install triton")
    return BuildError(f"model_name_or_path: {folder}: PaddleFormers cannot build it: {text[:300]}")


def parse(arguments: dict[str, Any]) -> tuple[Any, ...]:
    """PaddleFormers' own parsing and checks (model, data, preprocess, generating, finetuning arguments)."""
    from paddleformers.cli.hparams import get_train_args

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return get_train_args(dict(arguments))
    except (ValueError, TypeError, AssertionError) as error:
        raise BuildError(f"PaddleFormers rejects the arguments: {type(error).__name__}: {error}") from error
