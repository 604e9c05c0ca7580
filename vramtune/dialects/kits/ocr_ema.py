"""PaddleOCR's EMA as its tools/program.py runs it (child side): `ppocr.utils.ema.ModelEMA`, fp32 shadows of the
model's state made after AMP's decorate and updated after each optimizer step, and the swaps around it. To evaluate
(`Global.eval_batch_step`) and to save at an epoch's end (`latest`, and `iter_epoch_N` every `save_epoch_step`
epochs) program.py deep-copies the training state aside (`_ema_train_state`, `_ema_train_state_latest`,
`_ema_train_state_iter`), loads the EMA's weights, then restores the training ones from the copy, and keeps the copy
in its local until that swap comes again: from the first of each swap on, the training steps hold its copy.

Measured (en_PP-OCRv3 at batch 16, 12 batches, an evaluation every 3 steps, Paddle 3.3.1 CPU): 54,879,504 B more
allocated between steps after the first evaluation (the state's bytes, weights and buffers), the steps' peak
1,534,122,968 B before it and 1,588,544,744 B after; the probe, which restored the weights and freed the copy,
measured 1,536,629,596 B: -3.3% of the kit's run."""
from __future__ import annotations

import copy
import math
from typing import Any

from vramtune.dialects.kits.config import KitEMA, get_key


def evaluates(config: dict[str, Any]) -> bool:
    """tools/program.py evaluates during training: Global.eval_batch_step and an Eval section."""
    return bool(get_key(config, "Global.eval_batch_step") and get_key(config, "Eval"))


def kept_copies(config: dict[str, Any]) -> int:
    """How many copies of the state the training steps hold once every swap has come: the evaluation's where it
    evaluates, the `latest` save's from the second epoch, the `iter_epoch` save's after epoch save_epoch_step."""
    kit = config["Global"]
    if not kit.get("use_ema", False):
        return 0
    epochs, every = int(kit.get("epoch_num", 1) or 1), int(kit.get("save_epoch_step", 1) or 1)
    return int(evaluates(config)) + int(epochs > 1) + int(epochs > every)


def ema(config: dict[str, Any], model: Any) -> KitEMA | None:
    """The kit's EMA where Global.use_ema, else None."""
    if not config["Global"].get("use_ema", False):
        return None
    from ppocr.utils.ema import ModelEMA

    kit = config["Global"]
    return KitEMA(lambda: ModelEMA(model, decay=kit.get("ema_decay", 0.9998), gamma=kit.get("ema_gamma", 2000),
                                   ema_decay_type=kit.get("ema_decay_type", "threshold"),
                                   ema_filter_no_grad=kit.get("ema_filter_no_grad", False)),
                  lambda average: average.update(model))


def held_state(config: dict[str, Any], model: Any) -> dict[str, int]:
    """What the estimate counts of the EMA (estimating/held.py): the elements of its fp32 shadows, one for every entry
    of the model's state_dict (an RNN's weights under both names, its own and its cell's, as ModelEMA makes them:
    en_PP-OCRv3's 22,124,868 for 13,719,876 parameters), and the copies of the state the swaps keep (a deep copy
    holds each tensor once: the weights)."""
    if not config["Global"].get("use_ema", False):
        return {}
    return {"ema_elements": sum(math.prod(tensor.shape) for tensor in model.state_dict().values()),
            "state_copies": kept_copies(config)}


class Swaps:
    """The EMA and the copies program.py's swaps leave, in the probe: `after_step` (each optimizer step) updates the
    EMA and, from the first step on (before the measured ones), holds `kept` copies of the state; `evaluate` swaps
    the EMA's weights in as program.py does before it evaluates (the copy its last evaluation left freed first, a
    fresh one made); `train` puts the training weights back and keeps that copy."""

    def __init__(self, model: Any, average: KitEMA, kept: int):
        self.model, self.average, self.kept = model, average, kept
        self.copies: list[Any] = []
        self.swapped = False

    def after_step(self) -> None:
        self.average()
        self.copies += [copy.deepcopy(self.model.state_dict()) for _ in range(self.kept - len(self.copies))]

    def evaluate(self) -> None:
        if self.swapped or self.average.average is None:
            return
        if self.copies:
            self.copies.pop(0)
        self.copies.insert(0, copy.deepcopy(self.model.state_dict()))
        self.model.set_state_dict(self.average.average.apply())
        self.swapped = True

    def train(self) -> None:
        if self.swapped:
            self.model.set_state_dict(self.copies[0])
            self.swapped = False
