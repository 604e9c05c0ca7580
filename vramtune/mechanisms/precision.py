"""AMP: fp32; auto_cast O1 in fp16 (with GradScaler) or bf16; or O2 (pure fp16/bf16: the weights cast to half by
paddle.amp.decorate, fp32 master weights in the optimizer). CPU cannot measure any of it (see CPU_AMP_REASON).

What O2 changes in memory: the weights and gradients take 2 bytes per parameter, the optimizer adds 4 (fp32
master weights), so the counted state is the same 16 B/param for AdamW; O1's half copies of the weights, which
white-listed ops keep for backward (~2 B/param), are gone, and gray-listed ops produce half activations. O2 is
its own memory group (its own fitted line, its own counted state), measured rather than derived from O1.
"""
from __future__ import annotations

from typing import Any

from vramtune.mechanisms.base import Field, Mechanism, Option
from vramtune.text import did_you_mean

PURE = "-o2"  # suffix of the O2 precisions
SAFE = "-safe"  # fp16-safe: fp16 with the ops that overflow first kept in fp32 (the guide's answer to a NaN
#                 loss under fp16, after bf16); tried only when fp16 came back unstable
# least memory first: O2 never takes more than O1, and fp16 takes the bytes bf16 takes
AMP_PRECISIONS = ("fp16-o2", "bf16-o2", "fp16", "bf16")
PRECISIONS = ("fp32", *AMP_PRECISIONS, "fp16-safe")
SAFE_BLACK_LIST = ("softmax", "softmax_with_cross_entropy", "cross_entropy", "cross_entropy_with_softmax", "exp",
                   "log", "log_softmax", "layer_norm", "rms_norm", "mean", "reduce_mean", "sum", "reduce_sum",
                   "pow", "square", "sqrt", "rsqrt", "gelu", "silu", "tanh", "sigmoid", "batch_norm")
# what PaddleNLP's Trainer (2.8, autocast_smart_context_manager) passes to auto_cast, so probes train as it does
TRAINER_BLACK_LIST = ("reduce_sum", "c_softmax_with_cross_entropy")
TRAINER_O2_WHITE_LIST = ("lookup_table", "lookup_table_v2")  # embeddings return half under O2
AMP_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # Paddle's names


def dtype_of(precision: str) -> str:
    """fp32, fp16 or bf16: the number format a precision computes in."""
    return precision.removesuffix(PURE).removesuffix(SAFE)


def level_of(precision: str) -> str:
    """Paddle's AMP level: O0 (fp32), O1 (auto_cast) or O2 (decorated, pure half)."""
    return "O0" if precision == "fp32" else "O2" if precision.endswith(PURE) else "O1"


def _check(value: str) -> str | None:
    return None if value in PRECISIONS else f"must be one of {', '.join(PRECISIONS)}, got {value!r}"


def _allowed(values: list[str] | None) -> dict[str, Any]:
    return {"search.precisions": None if values is None else [v for v in values if v != "fp32"]}


class Precision(Mechanism):
    name = "precision"
    fields = (Field("precision", str, "fp32", "--precision", "-p",
                    "fp32 | fp16 | bf16 (AMP O1) | fp16-o2 | bf16-o2 (pure half, fp32 master weights) | fp16-safe "
                    "(fp16, overflow-prone ops in fp32)", _check, choices=PRECISIONS),)
    options = (Option("precision", "--precision", str, None, "AMP modes allowed (fp16, bf16, fp16-o2, bf16-o2; fp32 "
                      "alone means no AMP); repeat the option for several", _allowed, multiple=True,
                      choices=("fp32", *AMP_PRECISIONS)),)
    search_keys = ("precisions",)

    def read_search(self, section) -> list[str]:
        values = section.get("precisions", list, list(AMP_PRECISIONS))
        if values is None:
            return list(AMP_PRECISIONS)
        bad = [p for p in values if p not in ("fp32", *AMP_PRECISIONS)]
        if "fp16-safe" in bad:
            section.fail("precisions", "fp16-safe is not listed: it is tried by itself when fp16 goes non-finite")
        elif bad:
            section.fail("precisions", f"unknown precision {bad[0]!r}{did_you_mean(bad[0], AMP_PRECISIONS)}; "
                                       f"allowed: {', '.join(AMP_PRECISIONS)} (fp32 is always tried)")
        return [p for p in AMP_PRECISIONS if p in values]  # least memory first, whatever the spec's order

    def label(self, strategy, total_blocks: int | None = None) -> str:
        return strategy.precision

    def weight(self, strategy) -> int:
        """O1 wins a tie with O2 (fewer numerics changed), fp32 wins a tie with both."""
        return {"O0": 0, "O1": 1, "O2": 2}[level_of(strategy.precision)]

    def unsupported(self, strategy, device) -> str | None:
        return device.amp_unsupported.get(dtype_of(strategy.precision))

    def memory_group(self, strategy) -> str:
        """fp16 and bf16 take the same bytes; O2 takes its own."""
        return {"O0": "fp32", "O1": "amp", "O2": "amp-o2"}[level_of(strategy.precision)]

    def prepare_training(self, model, optimizer, strategy):
        """O2: the weights cast to half (BatchNorm kept fp32, and LayerNorm/InstanceNorm under fp16) and the
        optimizer given fp32 master weights, as PaddleNLP's Trainer does for fp16_opt_level O2, before data
        parallel or sharding wrap them (decorate refuses a wrapped model)."""
        if level_of(strategy.precision) != "O2":
            return model, optimizer
        import paddle

        return paddle.amp.decorate(models=model, optimizers=optimizer, level="O2",
                                   dtype=AMP_DTYPES[dtype_of(strategy.precision)])

    def paddlenlp(self, tuned):
        precision = tuned["precision"]
        dtype = dtype_of(precision)
        arguments: dict[str, Any] = {"fp16": dtype == "fp16", "bf16": dtype == "bf16"}
        if precision != "fp32":
            arguments["fp16_opt_level"] = level_of(precision)
        if precision == "fp16-safe":
            arguments["amp_custom_black_list"] = list(SAFE_BLACK_LIST)
        return arguments, []


MECHANISM = Precision()
