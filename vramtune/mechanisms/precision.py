"""AMP: fp32, or auto_cast O1 in fp16 (with GradScaler) or bf16. CPU cannot measure it (see CPU_AMP_REASON)."""
from __future__ import annotations

from typing import Any

from vramtune.mechanisms.base import Field, Mechanism, Option
from vramtune.text import did_you_mean

PRECISIONS = ("fp32", "fp16", "bf16", "fp16-safe")
AMP_PRECISIONS = ("fp16", "bf16")
# fp16-safe: fp16 with the ops that overflow first kept in fp32 (the guide's answer to a NaN loss under fp16,
# after bf16); tried only when fp16 came back unstable
SAFE_BLACK_LIST = ("softmax", "softmax_with_cross_entropy", "cross_entropy", "cross_entropy_with_softmax", "exp",
                   "log", "log_softmax", "layer_norm", "rms_norm", "mean", "reduce_mean", "sum", "reduce_sum",
                   "pow", "square", "sqrt", "rsqrt", "gelu", "silu", "tanh", "sigmoid", "batch_norm")


def _check(value: str) -> str | None:
    return None if value in PRECISIONS else f"must be one of {', '.join(PRECISIONS)}, got {value!r}"


def _allowed(values: list[str] | None) -> dict[str, Any]:
    return {"search.precisions": None if values is None else [v for v in values if v != "fp32"]}


class Precision(Mechanism):
    name = "precision"
    fields = (Field("precision", str, "fp32", "--precision", "-p",
                    "fp32 | fp16 | bf16 | fp16-safe (fp16, overflow-prone ops in fp32)", _check),)
    options = (Option("precision", "--precision", str, None, "AMP modes allowed (fp16, bf16; fp32 alone means no "
                      "AMP); repeat the option for several", _allowed, multiple=True),)
    search_keys = ("precisions",)

    def read_search(self, section) -> list[str]:
        values = section.get("precisions", list, list(AMP_PRECISIONS))
        if values is None:
            return list(AMP_PRECISIONS)
        bad = [p for p in values if p not in ("fp32", *AMP_PRECISIONS)]
        if bad:
            section.fail("precisions", f"unknown precision {bad[0]!r}{did_you_mean(bad[0], PRECISIONS)}; "
                                       f"allowed: {', '.join(AMP_PRECISIONS)} (fp32 is always tried)")
        return [p for p in values if p in AMP_PRECISIONS]

    def label(self, strategy) -> str:
        return strategy.precision

    def weight(self, strategy) -> int:
        return int(strategy.precision != "fp32")

    def unsupported(self, strategy, device) -> str | None:
        return device.amp_unsupported.get(strategy.precision.removesuffix("-safe"))

    def memory_group(self, strategy) -> str:
        return "fp32" if strategy.precision == "fp32" else "amp"  # fp16 and bf16 take the same bytes

    def paddlenlp(self, tuned):
        precision = tuned["precision"]
        arguments: dict[str, Any] = {"fp16": precision.startswith("fp16"), "bf16": precision == "bf16"}
        if precision != "fp32":
            arguments["fp16_opt_level"] = "O1"
        if precision == "fp16-safe":
            arguments["amp_custom_black_list"] = list(SAFE_BLACK_LIST)
        return arguments, []


MECHANISM = Precision()
