"""What a `paddle.io.DataLoader` holds beside the batch a loop trains on, in the training process's host allocator.

Measured (Paddle 3.3.1, CPU, the host allocator's "Allocated" counter in the training process, a loader kept full):
with `num_workers` 0 its thread converts each batch here and holds prefetch_factor (its blocking queue) +
reader_buffer_size (the buffered reader's, which re-queues a slot each time it hands one out) + 1 (the one it waits
to queue) batches ahead; with workers and no shared memory this process converts what they send and holds
prefetch_factor x num_workers (the queue's capacity); with shared memory the workers' batches are mapped files
Paddle's allocator never counts (nor the batch trained on).

On a GPU, a dygraph DataLoader pins memory (paddle/io/reader.py: `use_pinned_memory()` unset -> True) and its
buffered reader copies each batch into CUDA-pinned host memory (buffered_reader.cc, the `pin_memory_` branch of
ReadAsync), which Paddle counts as host memory, not the card's: only with `paddle.io.use_pinned_memory(False)`
does it copy its slots to the card."""
from __future__ import annotations

BUFFERED_BEFORE_3 = 2  # Paddle 2.6's buffered reader holds 2 batches; 3.x made it DataLoader's reader_buffer_size


def loader_defaults() -> tuple[int, int]:
    """(reader_buffer_size, prefetch_factor) of paddle.io.DataLoader's defaults; the buffer 0 where it does not
    buffer by default."""
    import inspect

    import paddle

    defaults = inspect.signature(paddle.io.DataLoader).parameters
    size = defaults["reader_buffer_size"].default if "reader_buffer_size" in defaults else BUFFERED_BEFORE_3
    return (size if defaults["use_buffer_reader"].default else 0), defaults["prefetch_factor"].default


def host_read_ahead(workers: int, shared_memory: bool, buffer_size: int | None = None,
                    prefetch: int | None = None) -> int:
    """The batches the loader holds ahead of the one trained on in this process's host allocator; `buffer_size`
    and `prefetch` as the tool passes them (None: Paddle's defaults)."""
    default_buffer, default_prefetch = loader_defaults()
    buffer_size = default_buffer if buffer_size is None else buffer_size
    prefetch = default_prefetch if prefetch is None else prefetch
    if workers <= 0:
        return prefetch + buffer_size + 1
    return 0 if shared_memory else prefetch * workers
