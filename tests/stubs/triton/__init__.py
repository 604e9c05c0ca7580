"""An import-only stand-in for `triton`, for the tests' PaddleOCR-VL runs where the package is not installed.

PaddleFormers 1.2's PaddleOCR-VL module imports its triton kernels (`paddleformers/triton_kernels/rope_triton.py`:
`@triton.jit` and `tl.*` annotations at import); a CPU never calls them: their `is_available` reads triton's version
(>= 3.0) and `use_triton_in_paddle`, and the model runs its Paddle path otherwise. The real package is ~1 GB
installed; this one only lets the module import. Its version, below 3.0, keeps every kernel unavailable, so the
probe and the workflow run the path a CPU with the real triton runs. Tests only: never on vramtune's path."""
from typing import Any

__version__ = "0.0.0"


class _Stand:
    """Anything a module does with triton at import: an attribute, a decorator, a call."""

    def __getattr__(self, name: str) -> "_Stand":
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # @triton.jit, @triton.autotune(...)(fn): the function itself
        return lambda function: function


def jit(function: Any = None, **kwargs: Any) -> Any:
    return function if function is not None else (lambda wrapped: wrapped)


def __getattr__(name: str) -> _Stand:
    return _Stand()
