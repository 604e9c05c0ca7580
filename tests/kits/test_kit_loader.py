"""The kits' DataLoader read-ahead (vramtune/dialects/kits/loader.py) is what Paddle's host allocator counts in the
training process beside the batch trained on, for each way a kit's config sets its loader."""
from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import HUNG

COUNT = """import sys, time
import numpy as np
import paddle
from paddle.io import DataLoader, Dataset
from vramtune.dialects.kits.loader import read_ahead

workers, shared = int(sys.argv[1]), sys.argv[2] == "1"
BATCH = 4 << 20  # 4 samples of 1 MiB


class Random(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return np.ones(1 << 18, "float32")


paddle.set_device("cpu")
counted = paddle.base.core.host_memory_stat_current_value
base = counted("Allocated", 0)
batches = iter(DataLoader(Random(), batch_size=4, num_workers=workers, use_shared_memory=shared, return_list=True))
held = next(batches)
expected = read_ahead(workers, shared, on_cpu=True) + (0 if workers and shared else 1)  # and the one trained on
deadline = time.time() + 1800  # (HUNG) until the loader has read all it reads ahead (its thread and workers fill it)
while (counted("Allocated", 0) - base) // BATCH < expected and time.time() < deadline:
    time.sleep(0.1)
time.sleep(1)  # and no more after it
print("COUNTED", (counted("Allocated", 0) - base) / BATCH, expected)
"""


@pytest.mark.paddle
@pytest.mark.parametrize(("workers", "shared"), [(0, False), (2, False), (2, True)])
def test_read_ahead_is_what_the_allocator_counts(workers, shared):
    done = subprocess.run([sys.executable, "-c", COUNT, str(workers), str(int(shared))], capture_output=True,
                          text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr[-3000:]
    counted, expected = done.stdout.split("COUNTED")[1].split()
    assert float(counted) == pytest.approx(int(expected), abs=0.05)
