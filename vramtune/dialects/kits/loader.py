"""What a kit's `paddle.io.DataLoader` holds beside the batch it trains on, where the device's counter sees it.

Measured (Paddle 3.3.1, CPU, the host allocator's "Allocated" counter in the training process, a loader kept
full): with `num_workers` 0 its thread converts each batch here and holds prefetch_factor (its blocking queue) +
reader_buffer_size (the buffered reader's) + 1 (the one it waits to queue) = 5 batches ahead; with workers and no
shared memory this process converts what they send and holds prefetch_factor x num_workers (the queue's capacity);
with shared memory the workers' batches are mapped files Paddle's allocator never counts (nor the batch trained on).
On a GPU the buffered reader copies its reader_buffer_size batches to the card (Paddle's documentation)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramtune.dialects.kits.config import get_key
from vramtune.sources.base import BuiltModel

BUFFERED_BEFORE_3 = 2  # Paddle 2.6's buffered reader holds 2 batches; 3.x made it DataLoader's reader_buffer_size


def read_ahead(workers: int, shared_memory: bool, on_cpu: bool) -> int:
    """The batches the loader holds ahead of the one it trains on, in the device's allocator (Paddle's defaults)."""
    import inspect

    import paddle

    defaults = inspect.signature(paddle.io.DataLoader).parameters
    prefetch = defaults["prefetch_factor"].default
    size = defaults["reader_buffer_size"].default if "reader_buffer_size" in defaults else BUFFERED_BEFORE_3
    buffered = size if defaults["use_buffer_reader"].default else 0
    if not on_cpu:
        return buffered
    if workers <= 0:
        return prefetch + buffered + 1
    return 0 if shared_memory else prefetch * workers


def kit_read_ahead(config: dict[str, Any], loader: str) -> int:
    """read_ahead of the loader a kit builds from a config section (`num_workers`; `use_shared_memory`, which both
    PaddleClas' and PaddleOCR's build_dataloader pass, PaddleOCR's True when unset), on the device being probed."""
    import paddle

    return read_ahead(int(get_key(config, f"{loader}.num_workers", 0) or 0),
                      bool(get_key(config, f"{loader}.use_shared_memory", True)),
                      paddle.device.get_device().startswith("cpu"))


@dataclass
class ReadAhead:
    """A batch maker whose batches come with what the kit's loaders hold ahead of them: the training loader's
    `ahead` batches while the model trains, the evaluation loader's `eval_ahead` while it evaluates; `upcoming`
    (batch, training) makes one (by default the maker's own). `loss` trains on the batch alone."""
    make: Callable[[int], Any]
    train_loss: Callable[[Any, Any], Any]
    model: Any
    ahead: int
    eval_ahead: int = 0
    upcoming: Callable[[int, bool], Any] | None = None

    def make_batch(self, batch: int) -> tuple[Any, list[Any]]:
        training = self.model.training
        count = self.ahead if training else self.eval_ahead
        return self.make(batch), [self.upcoming(batch, training) if self.upcoming else self.make(batch)
                                  for _ in range(count)]

    def loss(self, network: Any, batch: tuple[Any, list[Any]]) -> Any:
        return self.train_loss(network, batch[0])

    def built(self, after_step: Callable[[], None] | None = None, held: dict[str, int] | None = None) -> BuiltModel:
        """The model the probe trains on these batches; `after_step`: the kit's EMA update, where it has one; `held`:
        what its loop holds beside the state, counted (BuiltModel.held)."""
        return BuiltModel(self.model, self.make_batch, self.loss, after_step=after_step, held=held or {})
