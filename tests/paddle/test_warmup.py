"""A probe's warmup step is one micro-batch and the optimizer step: the measured steps then peak at the same bytes
as after a whole accumulated step, and the optimizer's state exists. Each way runs in a fresh process (Paddle 2.6
cannot reset its peak counter)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import CONFIGS

pytestmark = pytest.mark.paddle

SCRIPT = """
import importlib.util, json, sys
import paddle
import paddle.nn.functional as F
from vramtune.child.counters import MemoryCounters
from vramtune.child.training import StepRunner, make_optimizer, optimizer_state_ready
from vramtune.strategy import Strategy

spec = importlib.util.spec_from_file_location("mlp_model", sys.argv[1])
mlp_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mlp_model)
paddle.set_device("cpu")
paddle.seed(0)
model = mlp_model.build(in_features=256, width=128, depth=6, classes=10)
optimizer = make_optimizer("adamw", 1e-3, model.parameters())
runner = StepRunner(model, optimizer, Strategy(micro_batch=64, accumulation=4))
batch = (paddle.randn([64, 256]), paddle.randint(0, 10, [64]))
loss_fn = lambda b: F.cross_entropy(model(b[0]), b[1])
getattr(runner, sys.argv[2])(loss_fn, batch)
ready, pending = optimizer_state_ready("adamw", optimizer), runner.pending
counters = MemoryCounters("cpu", 0)
counters.start()
for _ in range(2):
    runner.train_step(loss_fn, batch)
print(json.dumps({"peak": counters.peak()[0], "ready": ready, "pending": pending}))
"""


def warmed_with(method: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(CONFIGS / "mlp_model.py"), method], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_one_micro_batch_warmup_leaves_the_measured_peak_as_a_whole_step_does():
    whole, one = warmed_with("train_step"), warmed_with("warmup_step")
    assert one == whole and one["ready"] and one["pending"] == 0  # the peak to the byte
    assert one["peak"] > 2**20  # the activations of 64 samples through six 128-wide blocks, and the state
