"""Recompute block detection on real Paddle models: runs of blocks in mixed containers, segments of plain conv
stacks, user block paths; recompute trains like plain training and lowers the measured peak."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from paddle import nn

from vramtune.mechanisms.recompute.blocks import BlockError, RecomputeBlock, apply_recompute, block_path, find_blocks

pytestmark = pytest.mark.paddle

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "vision_recompute.py"
_SPEC = importlib.util.spec_from_file_location("vision_recompute", _BENCH)
vision_recompute = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(vision_recompute)


class Block(nn.Layer):
    """A residual conv block with BatchNorm; counts its forward runs (a recomputed block runs twice a step)."""

    def __init__(self, width: int):
        super().__init__()
        self.conv = nn.Conv2D(width, width, 3, padding=1)
        self.bn = nn.BatchNorm2D(width)
        self.runs = 0

    def forward(self, x):
        self.runs += 1
        return x + F.relu(self.bn(self.conv(x)))


def _head(width: int) -> nn.Sequential:
    return nn.Sequential(nn.AdaptiveAvgPool2D(1), nn.Flatten(), nn.Linear(width, 4))


class Mixed(nn.Layer):
    """Sequential(stem, B, B, B, head): the blocks share their container with other layers."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2D(3, width, 3, padding=1), Block(width), Block(width), Block(width),
                                  _head(width))

    def forward(self, x):
        return self.body(x)


class Listed(nn.Layer):
    """Calls its blocks through a plain Python list, as MobileNetV1, ShuffleNetV2 and DenseNet do."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.stem = nn.Conv2D(3, width, 3, padding=1)
        self.stages = [self.add_sublayer(f"block{i}", Block(width)) for i in range(3)]
        self.head = _head(width)

    def forward(self, x):
        x = self.stem(x)
        for block in self.stages:
            x = block(x)
        return self.head(x)


class Stack(nn.Layer):
    """VGG-like: plain conv stacks, no block type anywhere."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2),
            nn.Conv2D(8, 8, 3, padding=1), nn.BatchNorm2D(8), nn.ReLU(),
            nn.Conv2D(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.classifier(self.features(x))


def _built(factory, seed: int = 0) -> nn.Layer:
    paddle.seed(seed)
    return factory()


def _batch():
    paddle.seed(1)
    return paddle.randn([4, 3, 16, 16]), paddle.randint(0, 4, [4])


def _grads(model: nn.Layer) -> list[np.ndarray]:
    images, labels = _batch()
    model.train()
    F.cross_entropy(model(images), labels).backward()
    return [p.grad.numpy().copy() for p in model.parameters() if not p.stop_gradient]


def _names(slots) -> list[str]:
    return [type(slot.layers[0]).__name__ for slot in slots]


def test_a_run_of_blocks_in_a_mixed_container_counts():
    model = _built(Mixed)
    slots = find_blocks(model)
    assert [slot.keys for slot in slots] == [("1",), ("2",), ("3",)]
    assert _names(slots) == ["Block"] * 3 and block_path(model, slots) == "body"
    assert apply_recompute(_built(Listed), 0) == (3, ".")


def test_a_plain_stack_is_cut_before_each_conv_or_linear():
    model = _built(Stack)
    slots = find_blocks(model)
    assert [slot.keys for slot in slots] == [("0", "1", "2"), ("3", "4", "5"), ("6", "7", "8")]
    assert block_path(model, slots) == "features"
    assert [slot.keys for slot in find_blocks(model, "classifier")] == [("0", "1", "2"), ("3",)]


@pytest.mark.parametrize(("arch", "total", "path", "block"), [
    ("resnet18", 8, "layer1,layer2,layer3,layer4", "BasicBlock"),
    ("mobilenet_v2", 17, "features", "InvertedResidual"),
    ("mobilenet_v1", 13, ".", "DepthwiseSeparable"),
    ("densenet121", 58, "db_conv_2,db_conv_3,db_conv_4,db_conv_5", "DenseLayer"),
    ("vgg11", 8, "features", "Conv2D"),
])
def test_vision_models(arch, total, path, block):
    model = getattr(paddle.vision.models, arch)(num_classes=10)
    slots = find_blocks(model)
    assert (len(slots), block_path(model, slots), set(_names(slots))) == (total, path, {block})


def test_user_block_paths():
    model = _built(Mixed)
    assert len(find_blocks(model, "body")) == 3
    resnet = paddle.vision.models.resnet18(num_classes=10)
    assert apply_recompute(resnet, 1, "layer1, layer3") == (4, "layer1,layer3")
    assert apply_recompute(_built(Listed), 3, ".") == (3, ".")


def _message(call, *args) -> str:
    with pytest.raises(BlockError) as caught:
        call(*args)
    return str(caught.value)


def test_bad_block_paths_and_counts_say_what_is_wrong():
    model = _built(Mixed)
    assert _message(find_blocks, model, "body.9") == (
        "model.block_path: 'body.9' does not resolve: no '9' (children there: 0, 1, 2, 3, 4)")
    assert _message(find_blocks, model, "body.1") == (
        "model.block_path: 'body.1' is Block: no run of >= 2 same-type blocks among its children, and not a "
        "Sequential to cut into segments")
    assert _message(apply_recompute, nn.Linear(4, 4), 2) == "recomputed_blocks 2 is more than the 0 repeated blocks found"


@pytest.mark.parametrize("factory", [Mixed, Listed, Stack])
def test_recompute_gives_the_same_gradients(factory):
    plain = _grads(_built(factory))
    model = _built(factory)
    apply_recompute(model, 2)
    assert sum(isinstance(layer, RecomputeBlock) for layer in model.sublayers()) == 2
    for expected, got in zip(plain, _grads(model)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_recomputed_blocks_run_twice_even_when_called_through_a_list():
    model = _built(Listed)
    apply_recompute(model, 2)
    _grads(model)
    assert [block.runs for block in model.stages] == [2, 2, 1]


def test_batchnorm_running_stats_update_twice_in_a_recomputed_block():
    """A documented cost: the recomputation updates BN stats again (from zero: (1 + momentum) times the update)."""
    plain, model = _built(Mixed), _built(Mixed)
    apply_recompute(model, 1)
    _grads(plain)
    _grads(model)
    expected = (1 + 0.9) * plain.body[1].bn._mean.numpy()
    np.testing.assert_allclose(model.body[1].bn._mean.numpy(), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(model.body[2].bn._mean.numpy(), plain.body[2].bn._mean.numpy(), rtol=1e-6)


@pytest.mark.parametrize("arch", ["mobilenet_v2", "mobilenet_v1", "squeezenet1_1"])
def test_recompute_lowers_the_measured_peak(arch):
    """Fresh child processes, as probes run: peak allocated bytes of one AdamW step at r=0 and r=2."""
    plain, recomputed = (vision_recompute.measure(arch, 64, 4, r)["peak"] for r in (0, 2))
    assert recomputed < plain


def test_every_batchnorm_kind_gets_the_floor_and_the_estimate_counts_the_same_layers():
    """The probe's BatchNorm floor and the estimate's fp32-under-O2 count agree on what a BatchNorm is: the older
    nn.BatchNorm (not a _BatchNormBase) as well as BatchNorm1D/2D and SyncBatchNorm."""
    from vramtune.mechanisms.accumulation import MECHANISM as accumulation
    from vramtune.memory.layer_kinds import BATCHNORM

    model = nn.Sequential(nn.Conv2D(3, 4, 3), nn.BatchNorm(4), nn.BatchNorm2D(4), nn.SyncBatchNorm(4),
                          nn.Flatten(), nn.Linear(4, 2), nn.BatchNorm1D(2), nn.LayerNorm(2))
    _, facts = accumulation.prepare_model(model, None, None)
    assert facts == {"batchnorm_layers": 4}
    assert sum(isinstance(layer, BATCHNORM) for layer in model.sublayers()) == 4
