"""PaddleNLP transformers through their own configuration: a built-in configuration name, a local folder holding
config.json, or a config.json path; any architecture the installed PaddleNLP has. Weights are never loaded.

Each task trains as PaddleNLP's Trainer trains it: the batch holds the keys the Trainer passes (input_ids and
labels, or start/end positions) and the model computes its own loss.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramtune.core.errors import BuildError
from vramtune.core.reading import positive
from vramtune.core.strategy import dtype_of
from vramtune.core.text import did_you_mean
from vramtune.sources.base import BuiltModel, Source

TASKS = {"causal-lm": "ForCausalLM", "sequence-classification": "ForSequenceClassification",
         "token-classification": "ForTokenClassification", "question-answering": "ForQuestionAnswering"}


@dataclass
class PaddleNLPModel:
    config: str  # a built-in name, or an absolute path to a folder with config.json or to the file
    task: str | None = None  # None: from config.json's architectures, else sequence-classification
    overrides: dict[str, Any] = field(default_factory=dict)
    seq_len: int = 128
    num_labels: int = 2
    config_fields: dict[str, Any] = field(default_factory=dict)  # set as PaddleNLP's llm scripts set them
    zero_padding: bool = False  # packed sequences: each batch row carries its [seq, seq] attention mask

    @property
    def local(self) -> bool:
        return Path(self.config).is_absolute()


def looks_like_path(value: str) -> bool:
    return "/" in value or value.endswith(".json") or value.startswith(".")


def config_file(path: Path) -> Path:
    return path / "config.json" if path.is_dir() else path


def _transformers():

    try:
        import paddlenlp.transformers as transformers
    except ImportError as error:
        raise BuildError(f"model.source: paddlenlp needs PaddleNLP: pip install 'vramtune[nlp]' ({error})") from error
    return transformers


def builtin_names(transformers: Any) -> dict[str, type]:
    """Built-in configuration name -> its configuration class, over every architecture PaddleNLP has."""
    names: dict[str, type] = {}
    for attribute in dir(transformers):
        candidate = getattr(transformers, attribute, None)
        known = getattr(candidate, "pretrained_init_configuration", None)
        if attribute.endswith("Config") and isinstance(known, dict):
            names.update(dict.fromkeys(known, candidate))
    return names


def load_config(settings: PaddleNLPModel) -> Any:
    """The configuration, without any download: a built-in name or a local config.json."""

    transformers = _transformers()
    if settings.local:
        path = config_file(Path(settings.config))
        config = transformers.AutoConfig.from_pretrained(str(path))
        if type(config) is transformers.AutoConfig or not type(config).__name__.endswith("Config"):
            model_type = getattr(config, "model_type", None)
            raise BuildError(f"model.config: {path}: PaddleNLP has no architecture for it (architectures: "
                             f"{getattr(config, 'architectures', None)}, model_type: {model_type!r})")
        return config
    names = builtin_names(transformers)
    if settings.config not in names:
        raise BuildError(f"model.config: {settings.config!r} is neither a local folder nor a built-in PaddleNLP "
                         f"configuration name{did_you_mean(settings.config, names)}")
    return names[settings.config].from_pretrained(settings.config)


def task_class(config: Any, task: str | None) -> tuple[type, str]:
    """The model class for a task, found next to the configuration's class (e.g. LlamaConfig ->
    paddlenlp.transformers.llama.modeling.LlamaForCausalLM); the task defaults to config.json's."""
    import importlib


    prefix = type(config).__name__.removesuffix("Config")
    package = type(config).__module__.rsplit(".", 1)[0]
    modeling = importlib.import_module(f"{package}.modeling")
    has = [name for name, suffix in TASKS.items() if hasattr(modeling, prefix + suffix)]
    if task is None:
        declared = [name for name, suffix in TASKS.items()
                    if any(a.endswith(suffix) for a in getattr(config, "architectures", None) or [])]
        task = (declared or ["sequence-classification"])[0]
    if task not in has:
        raise BuildError(f"model.task: {prefix} has no {task} model in PaddleNLP (it has: {', '.join(has) or 'none'})")
    return getattr(modeling, prefix + TASKS[task]), task


def loss_of(output: Any) -> Any:
    """The loss a PaddleNLP model returns when given labels: a ModelOutput, a dict or a tuple."""
    if hasattr(output, "loss") and output.loss is not None:
        return output.loss
    if isinstance(output, dict):
        return output["loss"]
    return output[0] if isinstance(output, (tuple, list)) else output


class PaddleNLP(Source):
    name = "paddlenlp"
    settings = PaddleNLPModel
    modules = ("paddlenlp.transformers",)
    o2_built_in_half = True  # a causal LM, as the llm scripts build it (build())

    def read(self, model, data):
        config = model.get("config", str)
        task = model.get("task", str, None, choices=tuple(TASKS))
        overrides = model.get("overrides", dict, {}) or {}
        config_fields = model.get("config_fields", dict, {}) or {}
        if config and looks_like_path(config):
            path = (Path(model.file).resolve().parent / config).resolve()
            if not path.exists():
                model.fail("config", f"{config!r}: no such folder or file")
                config = None
            elif not config_file(path).is_file():
                model.fail("config", f"{config!r}: the folder has no config.json (its model configuration; "
                                     "weights are never loaded)")
                config = None
            else:
                config = str(path)
        seq_len = data.get("seq_len", int, check=positive(1 << 20))
        num_labels = data.get("num_labels", int, 2, check=positive())
        zero_padding = data.get("zero_padding", bool, False)
        if None in (config, seq_len, num_labels):
            return None
        return PaddleNLPModel(config, task, overrides, seq_len, num_labels, config_fields, bool(zero_padding))

    def unsupported(self, settings: PaddleNLPModel, strategy, device) -> str | None:
        """fp32 with use_flash_attention on a GPU under Paddle 2.x: PaddleNLP 2.8's models call
        F.scaled_dot_product_attention (or flash_attention directly), which on Paddle 2.6 is flash_attn for any dtype,
        with no fallback in either library."""
        if device.kind == "gpu" and dtype_of(strategy.precision) == "fp32" and \
                settings.config_fields.get("use_flash_attention") and device.paddle_version.startswith("2."):
            return ("use_flash_attention: PaddleNLP's flash attention runs on Paddle 2.6's flash_attn, which has GPU "
                    "kernels for float16 and bfloat16 only: fp32 cannot run it; to measure fp32, set "
                    "use_flash_attention: false")
        return None

    def notes(self, settings: PaddleNLPModel, device_kind: str) -> list[str]:
        if settings.config_fields.get("use_flash_attention") and device_kind == "cpu":
            return ["use_flash_attention: Paddle runs plain attention on CPU, which keeps the [seq, seq] attention "
                    "scores flash attention never stores: this CPU peak over-states what a GPU with flash attention "
                    "needs"]
        return []

    elsewhere = "write model.config as the absolute path {found}"

    def found_from(self, settings: PaddleNLPModel, model: dict[str, Any], folder: str) -> dict[str, str | None]:
        config = model.get("config")
        if not isinstance(config, str) or not looks_like_path(config):
            return {}  # a built-in name
        path = (Path(folder) / config).resolve()  # as read(): from the spec's folder
        return {"model.config": str(path) if path.exists() else None}

    def identity(self, settings: PaddleNLPModel, spec_dir: str) -> dict[str, Any]:
        from importlib import metadata

        try:
            version = metadata.version("paddlenlp")
        except metadata.PackageNotFoundError:
            version = None
        identity: dict[str, Any] = {"paddlenlp": version}
        if settings.local:
            identity["config_json"] = hashlib.sha256(config_file(Path(settings.config)).read_bytes()).hexdigest()[:16]
        return identity

    def build(self, settings: PaddleNLPModel, spec_dir: str, configure):
        import paddle

        config = load_config(settings)
        unknown = [key for key in settings.overrides if not hasattr(config, key)]
        if unknown:
            raise BuildError(f"model.overrides: {unknown[0]!r} is not a field of {type(config).__name__}"
                             f"{did_you_mean(unknown[0], vars(config))}")
        for key, value in settings.overrides.items():
            setattr(config, key, value)
        for key, value in settings.config_fields.items():  # as the llm scripts: flash attention where the model has it
            if key != "use_flash_attention" or hasattr(config, key):
                setattr(config, key, value)
        config.num_labels = settings.num_labels
        limit = getattr(config, "max_position_embeddings", None)
        if limit and settings.seq_len > limit:
            raise BuildError(f"data.seq_len: {settings.seq_len} exceeds the model's max_position_embeddings ({limit})")
        model_class, task = task_class(config, settings.task)
        configure(config)  # e.g. the recompute granularity and layers, read while the model is built
        # the llm scripts build a causal LM in the run's dtype (finetune_generation.py: AutoConfig and from_config
        # given bfloat16/float16 under O2, the probe's default dtype then); the Trainer scripts' models in float32
        dtype = paddle.get_default_dtype() if task == "causal-lm" else "float32"
        if dtype != "float32":
            config.dtype = dtype
        net = model_class.from_config(config, dtype=dtype)
        vocab, seq_len, labels = config.vocab_size, settings.seq_len, settings.num_labels

        def make_batch(batch: int) -> dict[str, Any]:
            ids = paddle.randint(1, vocab, [batch, seq_len])  # id 0 is often the padding/ignored label
            if task == "causal-lm" and settings.zero_padding:  # as the llm scripts' InTokens datasets collate it
                mask = paddle.tril(paddle.ones([batch, 1, seq_len, seq_len], dtype="bool"))
                return {"input_ids": ids, "labels": paddle.randint(1, vocab, [batch, seq_len]), "attention_mask": mask}
            if task == "causal-lm":
                return {"input_ids": ids, "labels": paddle.randint(1, vocab, [batch, seq_len])}
            if task == "token-classification":
                return {"input_ids": ids, "labels": paddle.randint(0, labels, [batch, seq_len])}
            if task == "question-answering":
                return {"input_ids": ids, "start_positions": paddle.randint(0, seq_len, [batch]),
                        "end_positions": paddle.randint(0, seq_len, [batch])}
            return {"input_ids": ids, "labels": paddle.randint(0, labels, [batch])}

        def loss(model, batch):
            return loss_of(model(**batch))

        return BuiltModel(net, make_batch, loss, config)


SOURCE = PaddleNLP()
