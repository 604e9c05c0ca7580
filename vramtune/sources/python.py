"""The user's own model: `factory: "module:callable"` plus input/label shapes from the spec."""
from __future__ import annotations

import ast
import hashlib
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramtune.core.errors import BuildError
from vramtune.core.oom import looks_like_oom
from vramtune.core.reading import Section, positive
from vramtune.sources.base import BuiltModel, Source

LOSSES = ("cross_entropy", "mse", "model")
DTYPES = ("float32", "float16", "bfloat16", "int64", "int32")
FACTORY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass
class TensorSpec:
    shape: list[int]
    dtype: str = "float32"
    high: int | None = None  # integer tensors are drawn from [0, high)


@dataclass
class PythonModel:
    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    loss: str = "cross_entropy"
    inputs: list[TensorSpec] = field(default_factory=list)
    labels: TensorSpec | None = None


def _tensor(section: Section) -> TensorSpec | None:
    shape = section.get("shape", list)
    dtype = section.get("dtype", str, "float32", choices=DTYPES)
    high = section.get("high", int, None, check=positive())
    section.finish()
    if shape is None or dtype is None:
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        section.fail("shape", f"must be a list of positive integers (without the batch dimension), got {shape}")
        return None
    if dtype.startswith("int") and high is None:
        section.fail("high", f"is required for {dtype} tensors (values are drawn from [0, high))")
        return None
    return TensorSpec(list(shape), dtype, high)


def search_roots(spec_dir: str) -> list[str]:
    """Where a factory module is imported from: the spec's folder first, then PYTHONPATH."""
    return [spec_dir, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]


def _module_file(name: str, roots: list[str]) -> Path | None:
    parts = name.split(".")
    for root in roots:
        for candidate in (Path(root, *parts).with_suffix(".py"), Path(root, *parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def local_module_files(module: str, roots: list[str]) -> list[Path]:
    """The module's file and every module it imports that lives in the same roots (not installed packages)."""
    found: dict[Path, None] = {}
    pending = [module]
    while pending:
        path = _module_file(pending.pop(), roots)
        if path is None or path in found:
            continue
        found[path] = None
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                pending.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                pending.append(node.module)
    return list(found)


class Python(Source):
    name = "python"
    settings = PythonModel

    def read(self, model, data):
        factory = model.get("factory", str, check=lambda v: None if FACTORY_PATTERN.match(v) else
                            f"must look like 'package.module:callable', got {v!r}")
        settings = PythonModel(factory=factory, kwargs=model.get("kwargs", dict, {}) or {},
                               loss=model.get("loss", str, "cross_entropy", choices=LOSSES))
        data.seen.add("inputs")
        raw_inputs = data.data.get("inputs")
        if not isinstance(raw_inputs, list) or not raw_inputs:
            data.fail("inputs", "is required: a non-empty list of {shape, dtype[, high]}, one per forward() input")
        else:
            for i, raw in enumerate(raw_inputs):
                tensor = _tensor(Section(data.problems, data.file, data.key(f"inputs[{i}]"), raw))
                if tensor:
                    settings.inputs.append(tensor)
        if settings.loss != "model":
            labels = data.sub("labels", required=True)
            settings.labels = _tensor(labels) if labels else None
        elif "labels" in data.data:
            data.fail("labels", "is not used with loss: model (the model returns its own loss)")
            data.seen.add("labels")
        return settings if factory and settings.loss else None

    def from_json(self, data):
        labels = data.get("labels")
        return PythonModel(**{**data, "inputs": [TensorSpec(**t) for t in data["inputs"]],
                              "labels": TensorSpec(**labels) if labels else None})

    elsewhere = "put {folder} on PYTHONPATH"

    def found_from(self, settings: PythonModel, model: dict[str, Any], folder: str) -> dict[str, str | None]:
        found = _module_file(settings.factory.partition(":")[0], search_roots(folder))
        return {"model.factory": str(found) if found else None}

    def identity(self, settings: PythonModel, spec_dir: str) -> dict[str, Any]:
        """The source text of the factory module and the local modules it imports: an edit must re-probe."""
        module = settings.factory.partition(":")[0]
        digest = hashlib.sha256()
        for path in local_module_files(module, search_roots(spec_dir)):
            digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
        return {"factory_source": digest.hexdigest()[:16]}

    def build(self, settings: PythonModel, spec_dir: str, configure):
        import paddle
        import paddle.nn.functional as F

        from vramtune.sources.tensors import first_output, random_tensor

        factory = _load_factory(settings.factory, spec_dir)
        try:
            net = factory(**settings.kwargs)
        except Exception as error:
            if isinstance(error, MemoryError) or looks_like_oom(str(error)):
                raise  # the weights do not fit: a memory result, not bad input
            raise BuildError(f"model.factory: {settings.factory!r} raised {type(error).__name__}: {error}") from error
        if not isinstance(net, paddle.nn.Layer):
            raise BuildError(f"model.factory: {settings.factory!r} returned {type(net).__name__}, "
                             "not a paddle.nn.Layer")

        def make_batch(batch: int):
            inputs = [random_tensor(batch, tensor) for tensor in settings.inputs]
            return inputs, random_tensor(batch, settings.labels) if settings.labels else None

        def loss(model, batch):
            inputs, labels = batch
            output = first_output(model(*inputs))
            if settings.loss == "model":
                return output.mean() if output.ndim else output
            if settings.loss == "mse":
                return F.mse_loss(output, labels.astype(output.dtype))
            return F.cross_entropy(output, labels)

        return BuiltModel(net, make_batch, loss)


def _load_factory(factory_path: str, spec_dir: str):
    """Import `module:callable`, looking in the spec's folder first, then PYTHONPATH."""
    import importlib


    module_name, _, attr = factory_path.partition(":")
    if spec_dir not in sys.path:
        sys.path.insert(0, spec_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name.split(".")[0] and error.name != module_name:
            raise BuildError(_import_failure(factory_path, module_name, error)) from error
        raise BuildError(f"model.factory: {factory_path!r}: no module named {module_name!r} in the spec's folder "
                         f"({spec_dir}) or on PYTHONPATH") from error
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


SOURCE = Python()
