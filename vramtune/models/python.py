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
    factory_path = spec.model.factory
    module_name, _, attr = factory_path.partition(":")
    if spec.base_dir not in sys.path:
        sys.path.insert(0, spec.base_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name.split(".")[0] and error.name != module_name:
            raise BuildError(_import_failure(factory_path, module_name, error)) from error
        raise BuildError(f"model.factory: {factory_path!r}: no module named {module_name!r} in the spec's folder "
                         f"({spec.base_dir}) or on PYTHONPATH") from error
    except Exception as error:
        raise BuildError(_import_failure(factory_path, module_name, error)) from error
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BuildError(f"model.factory: {factory_path!r}: module {module_name!r} has no callable {attr!r}")
    return factory


def _import_failure(factory_path: str, module_name: str, error: BaseException) -> str:
    """Name the line in the user's code where the import failed (not importlib's own frames)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<frozen")]
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"model.factory: {factory_path!r}: importing {module_name!r} failed: {type(error).__name__}: {error}{where}"


def build_python(spec: Spec) -> BuiltModel:
    factory = load_factory(spec)
    try:
        model = factory(**spec.model.kwargs)
    except Exception as error:
        raise BuildError(f"model.factory: {spec.model.factory!r} raised {type(error).__name__}: {error}") from error
    if not isinstance(model, paddle.nn.Layer):
        raise BuildError(f"model.factory: {spec.model.factory!r} returned {type(model).__name__}, "
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
