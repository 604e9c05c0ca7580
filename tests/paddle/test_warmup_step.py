"""A probe's warmup step (StepRunner.warmup_step): what the measured steps find after it is what they find after a
whole step (the optimizer's state, zeroed gradients, a step's first micro-batch next), and the measured peak is
the same to the byte. The same for the estimate's memory-only warmup (StepRunner.state_step: no forward pass), with
a frozen layer as under LoRA and the gradients clipped. No timing here: the throughput side is measured by
bench/warmup_bias.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HUNG

pytestmark = pytest.mark.paddle

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
import paddle
import paddle.nn.functional as F
from vramtune.child.counters import MemoryCounters
from vramtune.child.training import StepRunner
from vramtune.core.strategy import Strategy

warmup, accumulation, steps, frozen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "frozen"
paddle.set_device("cpu")
paddle.seed(0)
model = paddle.nn.Sequential(paddle.nn.Linear(256, 512), paddle.nn.ReLU(), paddle.nn.Linear(512, 10))
if frozen:
    model[0].weight.stop_gradient = True
clip = paddle.nn.ClipGradByGlobalNorm(1.0) if frozen else None
optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters(), grad_clip=clip)
runner = StepRunner(model, optimizer, Strategy(precision="fp32", micro_batch=64, accumulation=accumulation))
batch = paddle.randn([64, 256]), paddle.randint(0, 10, [64])
forwards = []

def loss_fn(data):
    forwards.append(1)
    return F.cross_entropy(model(data[0]), data[1])

runner.state_step() if warmup == "state_step" else getattr(runner, warmup)(loss_fn, batch)
counters = MemoryCounters("cpu", 0)
counters.start()
for _ in range(steps):
    runner.train_step(loss_fn, batch)
print(json.dumps({"peak": counters.peak()[0], "forwards": len(forwards)}))
"""


def measured(warmup: str, accumulation: int, steps: int = 2, frozen: str = "") -> dict:
    """Measured steps after `warmup` ('train_step', 'warmup_step' or 'state_step') in a fresh process, as a probe
    runs."""
    done = subprocess.run([sys.executable, "-c", CHILD, warmup, str(accumulation), str(steps), frozen], cwd=ROOT,
                          capture_output=True, text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("accumulation", [1, 2, 8])
def test_measured_peak_is_the_same_to_the_byte_after_either_warmup(accumulation):
    whole, short = measured("train_step", accumulation), measured("warmup_step", accumulation)
    assert short["peak"] == whole["peak"] > 0
    assert whole["forwards"] == 3 * accumulation
    assert short["forwards"] == 1 + 2 * accumulation


@pytest.mark.parametrize("frozen", ["", "frozen"])
def test_a_memory_only_warmup_leaves_the_measured_step_the_same_peak_to_the_byte(frozen):
    """The estimate's probes: one step after state_step (no forward before it) peaks as one after a whole step."""
    whole, state = measured("train_step", 1, steps=1, frozen=frozen), measured("state_step", 1, steps=1, frozen=frozen)
    assert state["peak"] == whole["peak"] > 0
    assert (whole["forwards"], state["forwards"]) == (2, 1)


def test_the_optimizer_state_exists_and_the_next_step_is_whole():
    import paddle
    import paddle.nn.functional as F

    from vramtune.child.training import StepRunner, optimizer_state_ready
    from vramtune.core.strategy import Strategy

    paddle.seed(0)
    model = paddle.nn.Linear(8, 3)
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    runner = StepRunner(model, optimizer, Strategy(precision="fp32", micro_batch=4, accumulation=5))
    batch = paddle.randn([4, 8]), paddle.randint(0, 3, [4])
    weight = model.weight.numpy().copy()

    def loss_fn(data):
        return F.cross_entropy(model(data[0]), data[1])

    assert not optimizer_state_ready("adamw", optimizer)
    runner.warmup_step(loss_fn, batch)
    assert optimizer_state_ready("adamw", optimizer)
    assert (model.weight.numpy() != weight).any()  # it stepped
    assert runner.pending == 0 and float(model.weight.grad.abs().sum()) == 0.0  # gradients kept, zeroed
    stepped = [runner.micro_step(loss_fn, batch)[1] for _ in range(5)]
    assert stepped == [False, False, False, False, True]
