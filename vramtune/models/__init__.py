"""Model sources: each turns a spec into a BuiltModel (random weights, a batch maker and a loss)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import paddle

from vramtune.spec import Spec, TensorSpec


class BuildError(Exception):
    """The spec's model cannot be built or does not accept the spec's data: a user error, not a probe result."""


@dataclass
class BuiltModel:
    model: paddle.nn.Layer
    make_batch: Callable[[int], Any]  # micro_batch -> batch
    loss: Callable[[paddle.nn.Layer, Any], paddle.Tensor]  # (model, batch) -> scalar loss


def random_tensor(batch: int, tensor: TensorSpec) -> paddle.Tensor:
    """A random batch for one input: integers from [0, high), floats from N(0, 1)."""
    shape = [batch, *tensor.shape]
    if tensor.dtype.startswith("int"):
        return paddle.randint(0, tensor.high or 2, shape, dtype=tensor.dtype)
    return paddle.randn(shape, dtype="float32").astype(tensor.dtype)


def first_output(output: Any) -> paddle.Tensor:
    """Logits (or a loss) from what forward() returned: a tensor, a tuple, or a ModelOutput."""
    if isinstance(output, (tuple, list)):
        return output[0]
    if hasattr(output, "logits"):
        return output.logits
    return output


def build(spec: Spec) -> BuiltModel:
    """Build the spec's model and check one sample goes through it, so shape errors surface as BuildError."""
    if spec.model.source == "paddlenlp":
        from vramtune.models.paddlenlp import build_paddlenlp as builder
    elif spec.model.source == "vision":
        from vramtune.models.vision import build_vision as builder
    else:
        from vramtune.models.python import build_python as builder
    built = builder(spec)
    try:
        with paddle.no_grad():
            built.loss(built.model, built.make_batch(1))
    except BuildError:
        raise
    except Exception as error:
        message = str(error).strip().splitlines()
        detail = next((line for line in message if "Error" in line or "error" in line), message[0] if message else "")
        raise BuildError(f"data: does not fit the model: one sample fails in forward: "
                         f"{type(error).__name__}: {detail[:300]}") from error
    return built
