"""A DataLoader's read-ahead (vramtune/sources/loader.py, the kits' and the Trainers') is what Paddle's host allocator
counts in the training process beside the batch trained on, for each way a kit's config sets its loader, and with
the reader_buffer_size PaddleFormers' Trainer passes (max(gradient_accumulation_steps, 2): 8 at k=8)."""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from conftest import HUNG

# PaddleFormers' Trainer passes reader_buffer_size, a DataLoader argument of Paddle 3 (2.6's has none)
BUFFERED = pytest.mark.skipif(int(metadata.version("paddlepaddle").split(".")[0]) < 3,
                              reason="Paddle 2.6's DataLoader takes no reader_buffer_size (PaddleFormers needs 3.x)")

COUNT = """import sys, time
import numpy as np
import paddle
from paddle.io import DataLoader, Dataset
from vramtune.sources.loader import host_read_ahead

workers, shared, buffer = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]) or None
BATCH = 4 << 20  # 4 samples of 1 MiB


class Random(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return np.ones(1 << 18, "float32")


paddle.set_device("cpu")
counted = paddle.base.core.host_memory_stat_current_value
base = counted("Allocated", 0)
sized = {"reader_buffer_size": buffer} if buffer else {}
batches = iter(DataLoader(Random(), batch_size=4, num_workers=workers, use_shared_memory=shared, return_list=True,
                          **sized))
held = next(batches)
expected = host_read_ahead(workers, shared, buffer) + (0 if workers and shared else 1)  # and the one trained on
deadline = time.time() + 1800  # (HUNG) until the loader has read all it reads ahead (its thread and workers fill it)
while (counted("Allocated", 0) - base) // BATCH < expected and time.time() < deadline:
    time.sleep(0.1)
time.sleep(1)  # and no more after it
print("COUNTED", (counted("Allocated", 0) - base) / BATCH, expected)
"""


@pytest.mark.paddle
@pytest.mark.parametrize(("workers", "shared", "buffer"), [(0, False, 0), (2, False, 0), (2, True, 0),
                                                         pytest.param(0, False, 8, marks=BUFFERED)])
def test_read_ahead_is_what_the_allocator_counts(workers, shared, buffer):
    done = subprocess.run([sys.executable, "-c", COUNT, str(workers), str(int(shared)), str(buffer)],
                          capture_output=True, text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr[-3000:]
    counted, expected = done.stdout.split("COUNTED")[1].split()
    assert float(counted) == pytest.approx(int(expected), abs=0.05)
