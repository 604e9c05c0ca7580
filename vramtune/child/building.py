"""Building a source's model in the child, with the one-sample shape check (what builders share: sources/tensors.py)."""
from __future__ import annotations

from typing import Any, Callable

import paddle

from vramtune.core.oom import looks_like_oom
from vramtune.core.text import error_line
from vramtune.sources.base import BuildError, BuiltModel, Source


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
