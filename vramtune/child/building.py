"""Building a source's model in the child, and the one-sample shape check the probe runs once the model is prepared
(what builders share: sources/tensors.py)."""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any, Callable

import paddle

from vramtune.core.errors import BuildError
from vramtune.core.oom import looks_like_oom
from vramtune.core.strategy import AMP_DTYPES, Strategy, dtype_of, level_of
from vramtune.core.text import error_line
from vramtune.mechanisms.base import Unsupported
from vramtune.sources.base import BuiltModel, Source


def built_dtype(source: Source, strategy: Strategy) -> str | None:
    """The dtype the model is built in where it is not float32: AMP O2's half type, for a source whose tool builds an
    O2 model so (decorate keeps what it finds in half; an fp32 build first needs twice the weights' memory, and the
    allocator keeps the freed fp32 chunks reserved)."""
    if source.o2_built_in_half and level_of(strategy.precision) == "O2":
        return AMP_DTYPES[dtype_of(strategy.precision)]
    return None


@contextlib.contextmanager
def default_dtype(dtype: str | None) -> Iterator[None]:
    """Paddle's default dtype set to `dtype` meanwhile (what the workflows' dtype_guard does around the build)."""
    if dtype is None:
        yield
        return
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)
    try:
        yield
    finally:
        paddle.set_default_dtype(previous)


def build_model(source: Source, settings: Any, spec_dir: str, configure: Callable[[Any], None],
                dtype: str | None = None) -> BuiltModel:
    """The source's model (built in `dtype`, where given). Running out of memory while building is a memory result,
    not bad input: it propagates as it is and the probe is classified `oom`; anything else is a BuildError."""
    try:
        with default_dtype(dtype):
            return source.build(settings, spec_dir, configure)
    except (MemoryError, BuildError):
        raise
    except Exception as error:
        if looks_like_oom(str(error)):
            raise
        raise BuildError(f"model: building it failed: {type(error).__name__}: {error_line(str(error))}") from error


class KernelUnsupported(Unsupported):
    """Paddle has no kernel for what the model runs, on this device in this dtype: the strategy is unsupported here."""


# kernel_factory.cc: "The kernel with key (GPU, ..., float32) of kernel `flash_attn` is not registered and fail to
# fallback to CPU one. ... Paddle support following DataTypes: float16, bfloat16" (flash_attn_kernel.cu registers
# the flash kernels on a GPU for float16 and bfloat16 only; there is none on a CPU)
UNREGISTERED_FLASH = re.compile(r"kernel `(flash_attn\w*|flashmask_attention\w*)` is not registered")


def kernel_unsupported(error: BaseException) -> str | None:
    """Why the strategy cannot run here, where the error is Paddle's missing flash attention kernel; else None."""
    found = UNREGISTERED_FLASH.search(str(error))
    if not found:
        return None
    return (f"Paddle has no {found.group(1)} kernel for this device and dtype (float16 and bfloat16 only on a GPU): "
            f"{error_line(str(error))}")[:400]


def check_one_sample(built: BuiltModel, prepared: Any) -> None:
    """Push one sample through the network that trains, as a training step runs it (every mechanism has prepared
    it; inside their forward context: AMP's auto_cast), so that shape errors surface as BuildError. Out of memory and
    what a mechanism cannot run (Unsupported) propagate; a kernel Paddle lacks for the device and dtype is
    KernelUnsupported."""
    try:
        with paddle.no_grad(), prepared.runner.forward_context():
            built.loss(prepared.network, built.make_batch(1))
    except Exception as error:
        if isinstance(error, (MemoryError, Unsupported)) or looks_like_oom(str(error)):
            raise
        why = kernel_unsupported(error)
        if why:
            raise KernelUnsupported(why) from error
        detail = error_line(str(error))[:300]
        raise BuildError(f"data: does not fit the model: one sample fails in forward: "
                         f"{type(error).__name__}: {detail}") from error
