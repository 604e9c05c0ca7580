"""The model spec: dataclasses, strict loading and validation with every problem reported at once."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from vramtune.units import SizeError, parse_size

SOURCES = ("paddlenlp", "vision", "python")
# (arch, task) -> paddlenlp class name. The config name is checked against the package when it is built.
PADDLENLP_MODELS: dict[tuple[str, str], str] = {
    ("bert", "sequence-classification"): "BertForSequenceClassification",
    ("ernie", "sequence-classification"): "ErnieForSequenceClassification",
    ("roberta", "sequence-classification"): "RobertaForSequenceClassification",
    ("gpt", "sequence-classification"): "GPTForSequenceClassification",
    ("gpt", "causal-lm"): "GPTForCausalLM",
    ("llama", "causal-lm"): "LlamaForCausalLM",
}
PADDLENLP_CONFIGS = {"bert": "BertConfig", "ernie": "ErnieConfig", "roberta": "RobertaConfig",
                     "gpt": "GPTConfig", "llama": "LlamaConfig"}
TASKS = ("sequence-classification", "causal-lm")
VISION_ARCHS = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2",
    "vgg11", "vgg13", "vgg16", "vgg19", "mobilenet_v1", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "densenet121", "squeezenet1_1", "shufflenet_v2_x1_0", "alexnet",
)
LOSSES = ("cross_entropy", "mse", "model")
OPTIMIZERS = ("adamw", "adam", "sgd", "momentum")
PRECISIONS = ("fp32", "fp16", "bf16")
AMP_PRECISIONS = ("fp16", "bf16")
DTYPES = ("float32", "float16", "bfloat16", "int64", "int32")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|gpu|gpu:\d+)$")
FACTORY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where, and what is allowed."""

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message}" if self.key else f"{self.file}: {self.message}"


class SpecError(Exception):
    """Every problem found in one or more specs."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int | None = None  # integer tensors are drawn from [0, high)


@dataclass
class ModelSpec:
    source: str
    arch: str | None = None
    config: str | None = None
    task: str = "sequence-classification"
    overrides: dict[str, Any] = field(default_factory=dict)
    factory: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    loss: str = "cross_entropy"
    recompute_blocks: str | None = None  # dotted path to a LayerList/Sequential; None = detect


@dataclass
class DataSpec:
    seq_len: int = 128
    num_labels: int = 2
    image_size: int = 224
    channels: int = 3
    num_classes: int = 1000
    inputs: list[TensorSpec] = field(default_factory=list)
    labels: TensorSpec | None = None


@dataclass
class TrainSpec:
    target_batch: int
    optimizer: str = "adamw"
    learning_rate: float = 5.0e-5


@dataclass
class SearchSpec:
    precisions: list[str] = field(default_factory=lambda: list(AMP_PRECISIONS))
    max_accumulation: int = 64
    recompute: str = "auto"
    micro_batches: list[int] | None = None  # allowed micro-batch sizes; None = every divisor of the target

    def candidate_micro_batches(self, target_batch: int) -> list[int]:
        """Micro-batches that reach the target exactly within max_accumulation, largest first."""
        allowed = self.micro_batches or range(1, target_batch + 1)
        return sorted((m for m in allowed if target_batch % m == 0
                       and target_batch // m <= self.max_accumulation), reverse=True)


@dataclass
class ProbeSpec:
    steps: int = 3
    warmup: int = 1
    timeout: float = 300.0


@dataclass
class Spec:
    name: str
    model: ModelSpec
    data: DataSpec
    train: TrainSpec
    device: str = "auto"
    budget: int | None = None  # None = auto (the device's total memory)
    headroom: float = 0.05
    search: SearchSpec = field(default_factory=SearchSpec)
    probe: ProbeSpec = field(default_factory=ProbeSpec)
    tuned: dict[str, Any] | None = None  # written by `vramtune apply`
    path: str = "<spec>"
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def base_dir(self) -> str:
        return str(Path(self.path).resolve().parent)


_REQUIRED = object()
_KINDS: dict[type, str] = {int: "an integer", float: "a number", str: "a string", list: "a list",
                           dict: "a mapping", bool: "true or false"}


class _Section:
    """Reads one mapping of the spec, recording problems instead of raising."""

    def __init__(self, problems: list[Problem], file: str, prefix: str, data: Any):
        self.problems, self.file, self.prefix = problems, file, prefix
        self.seen: set[str] = set()
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail("", f"must be a mapping, got {_describe(data)}")
            data = {}
        self.data = data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def fail(self, name: str, message: str) -> None:
        key = self.key(name) if name else self.prefix
        self.problems.append(Problem(self.file, key, message))

    def get(self, name: str, kind: type, default: Any = _REQUIRED, *, choices: tuple | None = None,
            check: Callable[[Any], str | None] | None = None) -> Any:
        self.seen.add(name)
        if name not in self.data or self.data[name] is None:
            if default is _REQUIRED:
                self.fail(name, "is required")
                return None
            return default
        value = self.data[name]
        if not _is_kind(value, kind):
            self.fail(name, f"must be {_KINDS[kind]}, got {_describe(value)}")
            return None
        if choices is not None and value not in choices:
            allowed = ", ".join(map(str, choices))
            self.fail(name, f"must be one of {allowed}; got {value!r}{_did_you_mean(value, choices)}")
            return None
        if check is not None:
            message = check(value)
            if message:
                self.fail(name, message)
                return None
        return float(value) if kind is float else value

    def sub(self, name: str, required: bool = False) -> _Section | None:
        """The nested section; None (after one problem) when a required one is missing."""
        self.seen.add(name)
        if required and self.data.get(name) is None:
            self.fail(name, "is required")
            return None
        return _Section(self.problems, self.file, self.key(name), self.data.get(name))

    def finish(self, allowed: tuple[str, ...] | None = None) -> None:
        """Report keys nobody asked for, with a did-you-mean."""
        known = allowed if allowed is not None else tuple(self.seen)
        for name in self.data:
            if name not in known:
                self.fail(str(name), f"unknown key{_did_you_mean(name, known)}")


def _is_kind(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _describe(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)
    return f"{kind} ({value!r})" if not isinstance(value, (dict, list)) else kind


def _did_you_mean(value: Any, options) -> str:
    close = difflib.get_close_matches(str(value), [str(o) for o in options], n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _positive(limit: int | None = None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value <= 0:
            return f"must be positive, got {value}"
        if limit is not None and value > limit:
            return f"must be at most {limit}, got {value}"
        return None
    return check


def _tensor(section: _Section, integer_labels_need_high: bool = True) -> TensorSpec | None:
    shape = section.get("shape", list)
    dtype = section.get("dtype", str, "float32", choices=DTYPES)
    high = section.get("high", int, None, check=_positive())
    section.finish()
    if shape is None or dtype is None:
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        section.fail("shape", f"must be a list of positive integers (without the batch dimension), got {shape}")
        return None
    if dtype.startswith("int") and high is None and integer_labels_need_high:
        section.fail("high", f"is required for {dtype} tensors (values are drawn from [0, high))")
        return None
    return TensorSpec(tuple(shape), dtype, high)


def _read_model(root: _Section) -> ModelSpec | None:
    section = root.sub("model", required=True)
    if section is None:
        return None
    source = section.get("source", str, choices=SOURCES)
    blocks = section.get("recompute_blocks", str, None)
    model = ModelSpec(source=source or "", recompute_blocks=blocks)
    if source == "paddlenlp":
        model.arch = section.get("arch", str, choices=tuple(PADDLENLP_CONFIGS))
        model.config = section.get("config", str)
        model.task = section.get("task", str, "sequence-classification", choices=TASKS)
        model.overrides = section.get("overrides", dict, {}) or {}
        if model.arch and model.task and (model.arch, model.task) not in PADDLENLP_MODELS:
            tasks = [t for (a, t) in PADDLENLP_MODELS if a == model.arch]
            section.fail("task", f"{model.task!r} is not available for arch {model.arch!r} (use {', '.join(tasks)})")
    elif source == "vision":
        model.arch = section.get("arch", str, choices=VISION_ARCHS)
        model.kwargs = section.get("kwargs", dict, {}) or {}
    elif source == "python":
        model.factory = section.get("factory", str, check=lambda v: None if FACTORY_PATTERN.match(v) else
                                    f"must look like 'package.module:callable', got {v!r}")
        model.kwargs = section.get("kwargs", dict, {}) or {}
        model.loss = section.get("loss", str, "cross_entropy", choices=LOSSES)
    else:
        section.seen.update(section.data)  # the source is already reported; its keys cannot be judged
    section.finish()
    return model if source else None


def _read_data(root: _Section, model: ModelSpec | None) -> DataSpec:
    section = root.sub("data", required=True)
    data = DataSpec()
    if section is None:
        return data
    source = model.source if model else None
    if source == "paddlenlp":
        data.seq_len = section.get("seq_len", int, check=_positive(1 << 20))
        data.num_labels = section.get("num_labels", int, 2, check=_positive())
    elif source == "vision":
        data.image_size = section.get("image_size", int, 224, check=_positive(1 << 14))
        data.channels = section.get("channels", int, 3, check=_positive(64))
        data.num_classes = section.get("num_classes", int, 1000, check=_positive())
    elif source == "python":
        section.seen.add("inputs")
        raw_inputs = section.data.get("inputs")
        if not isinstance(raw_inputs, list) or not raw_inputs:
            section.fail("inputs", "is required: a non-empty list of {shape, dtype[, high]}, one per forward() input")
        else:
            for i, raw in enumerate(raw_inputs):
                tensor = _tensor(_Section(section.problems, section.file, section.key(f"inputs[{i}]"), raw))
                if tensor:
                    data.inputs.append(tensor)
        if model.loss != "model":
            labels = section.sub("labels", required=True)
            data.labels = _tensor(labels) if labels else None
        elif "labels" in section.data:
            section.fail("labels", "is not used with loss: model (the model returns its own loss)")
            section.seen.add("labels")
    else:
        section.seen.update(section.data)  # the source is already reported wrong
    section.finish()
    return data


def _read_budget(root: _Section) -> int | None:
    root.seen.add("budget")
    value = root.data.get("budget", "auto")
    if value == "auto":
        return None
    try:
        return parse_size(value)
    except SizeError as error:
        root.fail("budget", f"{error} (or 'auto' on a GPU)")
        return None


def spec_from_dict(raw: Any, file: str = "<spec>") -> Spec:
    """Validate a parsed spec; raise SpecError listing every problem."""
    problems: list[Problem] = []
    if not isinstance(raw, dict):
        raise SpecError([Problem(file, "", f"must be a mapping, got {_describe(raw)}")])
    root = _Section(problems, file, "", raw)
    name = root.get("name", str, Path(file).stem)
    model = _read_model(root)
    data = _read_data(root, model)

    section = root.sub("train", required=True)
    train = TrainSpec(target_batch=0)
    if section is not None:
        train = TrainSpec(
            target_batch=section.get("target_batch", int, check=_positive(1 << 20)),
            optimizer=section.get("optimizer", str, "adamw", choices=OPTIMIZERS),
            learning_rate=section.get("learning_rate", float, 5.0e-5, check=_positive()),
        )
        section.finish()

    device = root.get("device", str, "auto", check=lambda v: None if DEVICE_PATTERN.match(v) else
                      f"must be auto, cpu, gpu or gpu:N, got {v!r}")
    budget = _read_budget(root)
    headroom = root.get("headroom", float, 0.05,
                        check=lambda v: None if 0 <= v < 0.9 else f"must be in [0, 0.9), got {v}")

    section = root.sub("search")
    search = SearchSpec(
        precisions=section.get("precisions", list, list(AMP_PRECISIONS)),
        max_accumulation=section.get("max_accumulation", int, 64, check=_positive(1 << 16)),
        recompute=section.get("recompute", str, "auto", choices=("auto", "off")),
        micro_batches=section.get("micro_batches", list, None),
    )
    if search.precisions is not None:
        bad = [p for p in search.precisions if p not in PRECISIONS]
        if bad:
            section.fail("precisions", f"unknown precision {bad[0]!r}{_did_you_mean(bad[0], PRECISIONS)}; "
                                       f"allowed: {', '.join(AMP_PRECISIONS)} (fp32 is always tried)")
        search.precisions = [p for p in search.precisions if p in AMP_PRECISIONS]
    if search.micro_batches is not None and not all(
            isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in search.micro_batches):
        section.fail("micro_batches", f"must be a list of positive integers, got {search.micro_batches}")
        search.micro_batches = None
    section.finish()

    section = root.sub("probe")
    probe = ProbeSpec(
        steps=section.get("steps", int, 3, check=_positive(1000)),
        warmup=section.get("warmup", int, 1, check=_positive(1000)),
        timeout=section.get("timeout", float, 300.0, check=_positive()),
    )
    section.finish()
    tuned = root.get("tuned", dict, None)
    root.finish()

    if train.target_batch and search.max_accumulation and not search.candidate_micro_batches(train.target_batch):
        allowed = f"micro_batches {search.micro_batches}" if search.micro_batches else "any micro-batch"
        problems.append(Problem(file, "train.target_batch", (
            f"{train.target_batch} cannot be reached: no micro-batch in {allowed} divides it "
            f"with accumulation <= {search.max_accumulation}")))
    if problems:
        raise SpecError(problems)
    return Spec(name=name, model=model, data=data, train=train, device=device, budget=budget,
                headroom=headroom, search=search, probe=probe, tuned=tuned, path=file, raw=raw)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing file or a syntax error becomes a SpecError with the line."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(file, "", "no such file")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(file, "", "is a directory, not a spec file")]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError([Problem(file, "", f"cannot be read: {error}")]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError([Problem(file, "", f"{where}YAML syntax error: {problem}")]) from None
    if raw is None:
        raise SpecError([Problem(file, "", "is empty")])
    return raw


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (e.g. 'train.target_batch') on a copy of a raw spec; None values are skipped."""
    result = yaml.safe_load(yaml.safe_dump(raw))
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = result
        *parents, last = dotted.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value
    return result


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> Spec:
    """Read and validate one spec file, with command-line overrides applied first."""
    raw = read_yaml(path)
    if overrides and isinstance(raw, dict):
        raw = apply_overrides(raw, overrides)
    return spec_from_dict(raw, str(path))


def require_tuned(spec: Spec) -> dict[str, Any]:
    """The `tuned:` section written by `vramtune apply`, or a SpecError saying how to get one."""
    if not spec.tuned:
        raise SpecError([Problem(spec.path, "tuned", "is missing: write it with `vramtune apply SPEC.yaml`")])
    return spec.tuned
