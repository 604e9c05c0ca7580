"""What a kit's `paddle.io.DataLoader` holds beside the batch it trains on, where the device's counter sees it: on a
CPU what vramtune/sources/loader.py measured (5 batches without workers). On a GPU the probe counts the buffered
reader's reader_buffer_size batches on the card, the safe side: by Paddle's source (sources/loader.py) a dygraph
loader pins them in host memory instead, which no GPU run has measured yet."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramtune.dialects.kits.config import get_key
from vramtune.sources.base import BuiltModel
from vramtune.sources.loader import host_read_ahead, loader_defaults


def read_ahead(workers: int, shared_memory: bool, on_cpu: bool) -> int:
    """The batches the loader holds ahead of the one it trains on, in the device's allocator (Paddle's defaults)."""
    return host_read_ahead(workers, shared_memory) if on_cpu else loader_defaults()[0]


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
