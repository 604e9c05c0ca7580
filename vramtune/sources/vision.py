"""paddle.vision models (resnet, mobilenet, vgg, densenet, ...) on random images."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramtune.core.errors import BuildError
from vramtune.core.reading import positive
from vramtune.sources.base import BuiltModel, Source

ARCHS = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2",
    "vgg11", "vgg13", "vgg16", "vgg19", "mobilenet_v1", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "densenet121", "squeezenet1_1", "shufflenet_v2_x1_0", "alexnet",
)


@dataclass
class VisionModel:
    arch: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    image_size: int = 224
    channels: int = 3
    num_classes: int = 1000


class Vision(Source):
    name = "vision"
    settings = VisionModel
    modules = ("paddle.vision",)

    def read(self, model, data):
        arch = model.get("arch", str, choices=ARCHS)
        settings = VisionModel(
            arch=arch, kwargs=model.get("kwargs", dict, {}) or {},
            image_size=data.get("image_size", int, 224, check=positive(1 << 14)),
            channels=data.get("channels", int, 3, check=positive(64)),
            num_classes=data.get("num_classes", int, 1000, check=positive()))
        return settings if arch else None

    def build(self, settings: VisionModel, spec_dir: str, configure):
        import paddle
        import paddle.nn.functional as F


        factory = getattr(paddle.vision.models, settings.arch, None)
        if factory is None:
            raise BuildError(f"model.arch: paddle.vision.models has no {settings.arch!r}")
        try:
            net = factory(num_classes=settings.num_classes, **settings.kwargs)
        except TypeError as error:
            raise BuildError(f"model.kwargs: {settings.arch} does not accept them: {error}") from error

        def make_batch(batch: int):
            images = paddle.randn([batch, settings.channels, settings.image_size, settings.image_size])
            return images, paddle.randint(0, settings.num_classes, [batch])

        def loss(model, batch):
            images, labels = batch
            return F.cross_entropy(model(images), labels)

        return BuiltModel(net, make_batch, loss)


SOURCE = Vision()
