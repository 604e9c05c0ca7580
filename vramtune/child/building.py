"""Building a source's model in the child, with the one-sample shape check, and the helpers builders share."""
from __future__ import annotations

from typing import Any, Callable

import paddle

from vramtune.oom import looks_like_oom
from vramtune.sources.base import BuildError, BuiltModel, Source
from vramtune.text import error_line


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


def build_model(source: Source, settings: Any, spec_dir: str, configure: Callable[[Any], None]) -> BuiltModel:
    """The source's model. Running out of memory while building is a memory result, not bad input: it propagates as
    it is and the probe is classified `oom`; anything else is a BuildError."""
    try:
        return source.build(settings, spec_dir, configure)
    except (MemoryError, BuildError):
        raise
    except Exception as error:
        if looks_like_oom(str(error)):
            raise
        raise BuildError(f"model: building it failed: {type(error).__name__}: {error_line(str(error))}") from error


def check_one_sample(built: BuiltModel) -> None:
    """Push one sample through, so that shape errors surface as BuildError (out of memory propagates)."""
    try:
        with paddle.no_grad():
            built.loss(built.model, built.make_batch(1))
    except Exception as error:
        if isinstance(error, MemoryError) or looks_like_oom(str(error)):
            raise
        detail = error_line(str(error))[:300]
        raise BuildError(f"data: does not fit the model: one sample fails in forward: "
                         f"{type(error).__name__}: {detail}") from error
