"""MemoryCounters against real Paddle on CPU, each test in a fresh child process as probes run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HUNG

pytestmark = pytest.mark.paddle

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
SLACK = 16 * MiB  # what Paddle itself may hold on the host besides the test's tensors

PRELUDE = """
import json
import paddle
from vramtune.child.counters import MemoryCounters

paddle.set_device("cpu")
counters = MemoryCounters("cpu", 0)

def tensor(mib):
    return paddle.zeros([mib * 2**20 // 4], dtype="float32")
"""


def child(code: str) -> dict:
    """Run PRELUDE + code in a fresh interpreter; code prints one JSON line last."""
    done = subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=HUNG)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_peak_covers_an_allocation_and_outlives_it():
    out = child("""
counters.start()
x = tensor(100)
held = counters.peak()
del x
print(json.dumps({"held": held, "freed": counters.peak()}))
""")
    allocated, reserved = out["held"]
    assert 100 * MiB <= allocated <= 100 * MiB + SLACK
    assert reserved is None
    assert out["freed"] == out["held"]  # a peak, not the memory in use


def test_start_restarts_the_peak_where_paddle_can():
    out = child("""
x = tensor(100)
del x
counters.start()
y = tensor(20)
print(json.dumps({"version": paddle.__version__, "resets": counters.resets, "peak": counters.peak()[0]}))
""")
    # Paddle 2.6 has no host_memory_stat_reset_peak_value; 3.x has.
    assert out["resets"] == (int(out["version"].split(".")[0]) >= 3)
    if out["resets"]:
        assert 20 * MiB <= out["peak"] <= 20 * MiB + SLACK
    else:
        assert out["peak"] >= 100 * MiB  # since process start


def test_warmup_step_peaks_no_higher_than_the_measured_steps():
    """Why peak-since-start is valid where Paddle cannot reset: a same-shaped warmup step peaks no higher."""
    out = child("""
model = paddle.nn.Linear(1024, 1024)  # 4 MiB of weights
optimizer = paddle.optimizer.Adam(parameters=model.parameters())
batch = paddle.randn([64, 1024])

def step():
    model(batch).square().mean().backward()
    optimizer.step()
    optimizer.clear_grad()

step()
warmup = counters.peak()[0]
counters.start()
step()
step()
print(json.dumps({"warmup": warmup, "measured": counters.peak()[0]}))
""")
    # weights, gradients, Adam's two moments, and from the second step on a fresh gradient beside the zeroed one
    assert 16 * MiB <= out["warmup"] <= out["measured"] <= 16 * MiB + SLACK
