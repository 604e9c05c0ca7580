"""A PaddleFormers model as a probe takes it, Paddle-free: the settings the spec keeps (the model folder, the file's
arguments, the sequence length measured), the arguments a probe parses (the keys the search decides left out, the CPU
equivalents of GPU-only settings on a CPU), PaddleFormers' own parsing of them, and what a model it cannot build
says. Shared by the source (source.py), the child's building (building.py) and the data pass (lengths.py)."""
from __future__ import annotations

import contextlib
import io
import tempfile
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


def architecture_error(folder: str, error: Exception) -> BuildError:
    """A model PaddleFormers cannot build here, said with why (paddlefleet: not on PyPI)."""
    text = f"{type(error).__name__}: {error}"
    if FLEET_HINT in text:
        return BuildError(f"model_name_or_path: {folder}: PaddleFormers builds this architecture through paddlefleet, "
                          "which is not on PyPI (nor on this machine): vramtune cannot probe it here; estimate it "
                          "without measuring: vramtune estimate")
    return BuildError(f"model_name_or_path: {folder}: PaddleFormers cannot build it: {text[:300]}")


def parse(arguments: dict[str, Any]) -> tuple[Any, ...]:
    """PaddleFormers' own parsing and checks (model, data, preprocess, generating, finetuning arguments)."""
    from paddleformers.cli.hparams import get_train_args

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return get_train_args(dict(arguments))
    except (ValueError, TypeError, AssertionError) as error:
        raise BuildError(f"PaddleFormers rejects the arguments: {type(error).__name__}: {error}") from error
