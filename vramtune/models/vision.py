"""paddle.vision models (resnet, mobilenet, vgg, ...) on random images."""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from vramtune.models import BuildError, BuiltModel
from vramtune.spec import Spec


def build_vision(spec: Spec) -> BuiltModel:
    factory = getattr(paddle.vision.models, spec.model.arch, None)
    if factory is None:
        raise BuildError(f"model.arch: paddle.vision.models has no {spec.model.arch!r}")
    data = spec.data
    try:
        model = factory(num_classes=data.num_classes, **spec.model.kwargs)
    except TypeError as error:
        raise BuildError(f"model.kwargs: {spec.model.arch} does not accept them: {error}") from error

    def make_batch(batch: int):
        images = paddle.randn([batch, data.channels, data.image_size, data.image_size])
        labels = paddle.randint(0, data.num_classes, [batch])
        return images, labels

    def loss(net: paddle.nn.Layer, batch) -> paddle.Tensor:
        images, labels = batch
        return F.cross_entropy(net(images), labels)

    return BuiltModel(model, make_batch, loss)
