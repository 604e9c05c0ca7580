"""Recompute's doctor check: vramtune's wrapper (blocks.py) lowers a small transformer's peak,
and so does PaddleFormers' or PaddleNLP's own recompute (native.py, as probes switch it on) on a small Llama where one
is installed.

Each pair is measured in one process, the recomputed step first: where the peak cannot be reset (Paddle 2.6) the
plain step's peak still reads right whenever it is the higher one, and when it is not, recompute saved nothing,
which is what the check reports."""
from __future__ import annotations

import gc
import importlib
from importlib import metadata
from typing import Any, Callable

from vramtune.core.records import Device
from vramtune.core.units import format_bytes
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict, failed_run

LIBRARIES = {"paddleformers": "PaddleFormers", "paddlenlp": "PaddleNLP"}  # the first installed is checked
LLAMA = {"vocab_size": 1000, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 256,
         "fuse_rms_norm": False, "use_fused_rms_norm": False}  # no fused kernels: they do not exist on CPU
TOKENS = (4, 128)  # batch, sequence


def possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def library() -> str | None:
    """The first library installed (asked of the installed distributions: the parent imports neither)."""
    return next((name for name in LIBRARIES if _installed(name)), None)


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def native_skip(device: Device) -> str | None:
    """Why the model's own recompute is not checked here. (On Paddle 2.6's CPU, which cannot keep the RNG state in
    recompute, it is checked without it, as probes run it: mechanisms/recompute/native.py configure().)"""
    return None if library() else "PaddleFormers / PaddleNLP not installed: their own recompute not checked"


def _pair(device: Device, build: Callable[[bool], Any], loss: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Recomputed first, then plain (see the module's docstring): each its own model, freed before the next (a
    model and its optimizer hold reference cycles: collected at once, not while the next one trains)."""
    from vramtune.doctor.workload import step_peak, transformer_loss

    peaks = {}
    for kind in ("recomputed", "plain"):
        peaks[kind] = step_peak(device, build(kind == "recomputed"), loss=loss or transformer_loss)
        gc.collect()
    return peaks


def _wrapper(recomputed: bool) -> Any:
    from vramtune.doctor.workload import LAYERS, transformer
    from vramtune.mechanisms.recompute.blocks import apply_recompute

    model = transformer()
    apply_recompute(model, LAYERS if recomputed else 0)
    return model


def _native(recomputed: bool) -> Any:
    from vramtune.core.strategy import Strategy
    from vramtune.mechanisms.recompute.native import configure, enable

    transformers = importlib.import_module(f"{library()}.transformers")
    config = transformers.LlamaConfig(**LLAMA)
    strategy = Strategy(recomputed_blocks=LLAMA["num_hidden_layers"] if recomputed else 0)
    configure(config, strategy)
    model = transformers.LlamaForCausalLM(config)
    enable(model, strategy)
    return model


def _llama_loss(model: Any) -> Any:
    import paddle

    from vramtune.sources.paddlenlp import loss_of

    ids = paddle.randint(0, LLAMA["vocab_size"], list(TOKENS))
    return loss_of(model(input_ids=ids, labels=ids))


class Recompute(Check):
    name = "recompute"
    title = "recompute lowers the peak"

    def parts(self, device: Device) -> tuple[str, ...]:
        return ("wrapper",) if native_skip(device) else ("wrapper", "native")

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        if part == "wrapper":
            return _pair(device, _wrapper)
        return {"library": LIBRARIES[library()], **_pair(device, _native, _llama_loss)}

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        failed = failed_run(runs)
        if failed:
            return failed
        figures, fails = [], []
        for part, run in runs.items():
            plain, recomputed = run.figures["plain"], run.figures["recomputed"]
            saved = plain["activations"] - recomputed["activations"]
            who = ("vramtune's wrapper" if part == "wrapper"
                   else f"{possessive(run.figures['library'])} own (a small Llama)")
            figures.append(f"{who}: activations {format_bytes(recomputed['activations'])} instead of "
                           f"{format_bytes(plain['activations'])} ({saved / plain['activations']:.0%} saved)")
            if saved <= 0:
                fails.append(who)
        figure = "; ".join(figures + [why for why in [native_skip(device)] if why])
        if fails:
            return Verdict(FAIL, figure, f"recompute ({' and '.join(fails)}) saves no memory here: vramtune's "
                                         "recompute rungs would cost time for nothing, and its memory model would "
                                         "predict savings that are not there")
        return Verdict(PASS, figure)


CHECK = Recompute()
