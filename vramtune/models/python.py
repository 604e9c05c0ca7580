"""The user's own model: `factory: "module:callable"` plus input/label shapes from the spec."""
from __future__ import annotations

import importlib
import sys
import traceback

import paddle
import paddle.nn.functional as F

from vramtune.models import BuildError, BuiltModel, first_output, random_tensor
from vramtune.spec import Spec


def load_factory(spec: Spec):
    """Import `module:callable`, looking in the spec's folder first, then PYTHONPATH."""
    module_name, _, attr = spec.model.factory.partition(":")
    if spec.base_dir not in sys.path:
        sys.path.insert(0, spec.base_dir)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the factory's, reported once
        where = traceback.extract_tb(error.__traceback__)[-1]
        raise BuildError(f"model.factory {spec.model.factory!r}: importing {module_name!r} failed: "
                         f"{type(error).__name__}: {error} ({where.filename}:{where.lineno})") from error
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BuildError(f"model.factory {spec.model.factory!r}: module {module_name!r} has no callable {attr!r}")
    return factory


def build_python(spec: Spec) -> BuiltModel:
    factory = load_factory(spec)
    try:
        model = factory(**spec.model.kwargs)
    except Exception as error:  # noqa: BLE001
        raise BuildError(f"model.factory {spec.model.factory!r} raised {type(error).__name__}: {error}") from error
    if not isinstance(model, paddle.nn.Layer):
        raise BuildError(f"model.factory {spec.model.factory!r} returned {type(model).__name__}, "
                         "not a paddle.nn.Layer")
    data, loss_kind = spec.data, spec.model.loss

    def make_batch(batch: int):
        inputs = [random_tensor(batch, tensor) for tensor in data.inputs]
        return inputs, random_tensor(batch, data.labels) if data.labels else None

    def loss(net: paddle.nn.Layer, batch) -> paddle.Tensor:
        inputs, labels = batch
        output = first_output(net(*inputs))
        if loss_kind == "model":
            return output.mean() if output.ndim else output
        if loss_kind == "mse":
            return F.mse_loss(output, labels.astype(output.dtype))
        return F.cross_entropy(output, labels)

    return BuiltModel(model, make_batch, loss)
