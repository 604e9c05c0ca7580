"""The training code the probes and vramtune.runtime share: block detection, recompute and accumulation must
train exactly like plain training (same gradients, same updates)."""
from __future__ import annotations

import importlib.util

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from conftest import CONFIGS

from vramtune.strategy import Strategy
from vramtune.training import BlockError, RecomputeBlock, StepRunner, apply_recompute, find_blocks

_SPEC = importlib.util.spec_from_file_location("mlp_model", CONFIGS / "mlp_model.py")
mlp_model = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mlp_model)


def _mlp(seed: int = 0):
    paddle.seed(seed)
    return mlp_model.build(in_features=16, width=16, depth=4, classes=3)


def _batch():
    paddle.seed(1)
    return paddle.randn([8, 16]), paddle.randint(0, 3, [8])


def _grads(model, batch):
    loss = F.cross_entropy(model(batch[0]), batch[1])
    loss.backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_block_detection():
    assert len(find_blocks(_mlp())) == 4
    resnet = paddle.vision.models.resnet18(num_classes=10)
    blocks = find_blocks(resnet)
    assert len(blocks) == 8 and {type(c._sub_layers[k]).__name__ for c, k in blocks} == {"BasicBlock"}
    assert apply_recompute(resnet, 0) == (8, "layer1,layer2,layer3,layer4")
    with pytest.raises(BlockError):
        find_blocks(_mlp(), "head")


def test_recompute_gives_the_same_gradients():
    batch = _batch()
    plain = _grads(_mlp(), batch)
    model = _mlp()
    assert apply_recompute(model, 3) == (4, "blocks")
    assert sum(isinstance(b, RecomputeBlock) for b in model.blocks) == 3
    for expected, got in zip(plain, _grads(model, batch)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_accumulation_steps_every_k_and_matches_one_big_step():
    batch = _batch()
    reference, model = _mlp(), _mlp()

    def run(net, strategy):
        optimizer = paddle.optimizer.SGD(learning_rate=0.1, parameters=net.parameters())
        runner = StepRunner(net, optimizer, strategy)
        stepped = [runner.micro_step(lambda b: F.cross_entropy(net(b[0]), b[1]), batch)[1]
                   for _ in range(strategy.accumulation)]
        return stepped

    assert run(reference, Strategy("fp32", 8, 1, 0)) == [True]
    assert run(model, Strategy("fp32", 8, 4, 0)) == [False, False, False, True]
    for expected, got in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
