"""to_static's Paddle side (imported in the probe child only): the model compiled by paddle.jit.to_static, whose
first call says why a model cannot be converted rather than failing as a crash."""
from __future__ import annotations

from typing import Any

import paddle

from vramtune.core.oom import is_oom
from vramtune.core.text import short_error
from vramtune.mechanisms.base import Unsupported


class Converted(paddle.nn.Layer):
    """The compiled model: its first call traces and converts the forward, where a model that cannot be converted
    fails (Unsupported, with the error); out of memory stays out of memory."""

    def __init__(self, static: Any):
        super().__init__()
        self.static = static
        self.traced = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.traced:
            return self.static(*args, **kwargs)
        try:
            output = self.static(*args, **kwargs)
        except Exception as error:
            if is_oom(error):
                raise
            raise Unsupported(f"to_static: the model cannot be converted: {short_error(error)}") from error
        self.traced = True
        return output


def converted(model: paddle.nn.Layer) -> Converted:
    return Converted(paddle.jit.to_static(model, full_graph=True))
