"""What builders share in the child (imports Paddle: call it from a `build` only): a random input batch, and the
logits in what a model's forward returned."""
from __future__ import annotations

from typing import Any

import paddle


def random_tensor(batch: int, tensor: Any) -> paddle.Tensor:
    """A random batch for one input (shape, dtype, high): integers from [0, high), floats from N(0, 1)."""
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
