"""The training code the probes and vramtune.runtime share: accumulation must train exactly like plain training
(same updates); recompute is proven the same way in test_blocks.py."""
from __future__ import annotations

import importlib.util

import numpy as np
import paddle
import paddle.nn.functional as F
from conftest import CONFIGS

from vramtune.child.training import StepRunner
from vramtune.core.strategy import Strategy

_SPEC = importlib.util.spec_from_file_location("mlp_model", CONFIGS / "mlp_model.py")
mlp_model = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mlp_model)


def _mlp(seed: int = 0):
    paddle.seed(seed)
    return mlp_model.build(in_features=16, width=16, depth=4, classes=3)


def _batch():
    paddle.seed(1)
    return paddle.randn([8, 16]), paddle.randint(0, 3, [8])


def test_accumulation_steps_every_k_and_matches_one_big_step():
    batch = _batch()
    reference, model = _mlp(), _mlp()

    def run(net, strategy):
        optimizer = paddle.optimizer.SGD(learning_rate=0.1, parameters=net.parameters())
        runner = StepRunner(net, optimizer, strategy)
        stepped = [runner.micro_step(lambda b: F.cross_entropy(net(b[0]), b[1]), batch)[1]
                   for _ in range(strategy.accumulation)]
        return stepped

    assert run(reference, Strategy(precision="fp32", micro_batch=8, accumulation=1)) == [True]
    assert run(model, Strategy(precision="fp32", micro_batch=8, accumulation=4)) == [False, False, False, True]
    for expected, got in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_o2_state_counts_half_weights_and_fp32_master_weights():
    """What O2 changes in the counted state, on real Paddle objects: paddle.amp.decorate casts nothing on CPU, so
    the weights are cast to bf16 by hand; AdamW with multi_precision (what decorate sets for O2) creates fp32
    master weights and moments before its kernel runs (CPU has no bf16 AdamW kernel: the step itself fails)."""
    from vramtune.child.training import state_counts

    model = _mlp()
    params = sum(int(p.numel()) for p in model.parameters())
    model.to(dtype="bfloat16")
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters(), multi_precision=True)
    for parameter in model.parameters():
        parameter.grad = paddle.ones_like(parameter)
    try:
        optimizer.step()
    except RuntimeError as error:
        assert "bfloat16" in str(error)
    counts = state_counts(model, optimizer)
    assert counts["weight_bytes"] == counts["gradient_bytes"] == 2 * params
    pows = 2 * 4 * len(model.parameters())  # beta1/beta2 powers, one float each per parameter
    assert counts["optimizer_bytes"] == (4 + 8) * params + pows  # fp32 master weights + two fp32 moments
