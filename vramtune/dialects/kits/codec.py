"""The kits' codec: the memory keys their configs share, both ways, in the Strategy's vocabulary. In: the spec's search
keys from a kit's config (what no kit's config can say is searched "off"), the AMP modes a kit's AMP keys can say,
the evaluation phase's train keys, and the precision a kit's AMP keys state. Out: a tuned strategy in Paddle's AMP
terms (amp_level, amp_dtype), the evaluation batch the probes found, and the kits' shared key `Global.to_static`.
Each kit's module (paddleclas.py, ...) names its own keys; what they share is here."""
from __future__ import annotations

from typing import Any

from vramtune.core.report import Tuned
from vramtune.core.strategy import AMP_DTYPES, AMP_PRECISIONS, PURE, Strategy, dtype_of, level_of

STATIC_KEY = "Global.to_static"  # PaddleClas's and PaddleOCR's: the model compiled with paddle.jit.to_static
DETECTION_STATIC_KEY = "to_static"  # PaddleDetection's trainer's
FP32_DTYPE = "float32"  # Paddle's dtype where AMP is off


def search_off(config: dict[str, Any]) -> dict[str, str]:
    """The spec's search keys for what no kit's config can say: recompute, sharding, and compiling unless the config
    compiles the model (its `Global.to_static` on: then the search tries it)."""
    section, _, key = STATIC_KEY.partition(".")
    node = config.get(section)
    compiles = isinstance(node, dict) and node.get(key)
    return {"recompute": "off", "sharding": "off", **({} if compiles else {"to_static": "off"})}


def batch_only() -> dict[str, Any]:
    """The spec's search keys that leave the search the batch alone, in fp32: for a kit whose config carries no
    other memory key (PaddleSeg, PaddleDetection: AMP is a flag of their tools/train.py)."""
    return {**search_off({}), "precisions": ["fp32"]}


def amp_choices(dtypes: tuple[str, ...]) -> list[str]:
    """The AMP modes a kit's config can say: every level, in the dtypes (Paddle's names) it has a key for, least
    memory first."""
    return [mode for mode in AMP_PRECISIONS if AMP_DTYPES.get(dtype_of(mode)) in dtypes]


def eval_phase(batch: int) -> dict[str, Any]:
    """The spec's train keys for the kit's evaluation at its batch: the loss only (the kits decode on the host)."""
    return {"evaluation": {"batch": batch, "keep": "loss"}}


def paddle_amp(strategy: Strategy) -> tuple[str, str]:
    """Paddle's AMP level (O0: none, O1, O2) and dtype (float16, bfloat16) of a strategy, as the kits' keys say them."""
    precision = strategy.precision
    return level_of(precision), AMP_DTYPES.get(dtype_of(precision), FP32_DTYPE)


def stated_precision(level: str, dtype: str) -> str:
    """The precision Paddle's AMP trains at this level (O0: none, O1, O2) and dtype (float16, bfloat16): the inverse
    of paddle_amp. fp32 where the dtype is no half type."""
    half = next((name for name, paddle in AMP_DTYPES.items() if paddle == dtype), None)
    if level == "O0" or half is None:
        return "fp32"
    return half + (PURE if level == "O2" else "")


def evaluated_batch(tuned: Tuned) -> int | None:
    """The evaluation batch the probes found to fit (None: none fits, or the config does not evaluate)."""
    return tuned.facts.get("eval_batch")


def compiled(tuned: Tuned) -> dict[str, Any]:
    """The kits' shared keys a choice sets: Global.to_static where it compiles the model."""
    return {STATIC_KEY: True} if tuned.strategy.to_static else {}
