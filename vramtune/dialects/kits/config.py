"""What every kit shares: finding the user's checkout of the kit from the config file, the kit's own `-o Key=value`
overrides (dotted keys, list indices allowed, values read as Python literals as the kits read them), and the
settings a probe carries to the child (the checkout, the config, the overrides and the probe's own ones)."""
from __future__ import annotations

import ast
import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from vramtune.dialects.kits.codec import search_off
from vramtune.sources.base import Source


class KitError(Exception):
    """A kit config that cannot be read, or a kit that cannot be imported: one clear message."""


@dataclass
class KitModel:
    """A probe's model: the kit's config in its checkout, built by the kit's own code in the child."""

    config: str  # the config file, absolute
    checkout: str  # the kit's checkout (the folder holding tools/train.py), put on sys.path in the child
    options: list[str] = field(default_factory=list)  # the user's -o Key=value overrides, in order
    probe_options: list[str] = field(default_factory=list)  # what the probe itself sets (no pretrained weights)


@dataclass
class Kit:
    """A kit's dialect: how its configs are recognised and what a config becomes."""

    name: str  # its source name: paddleclas, paddleocr
    package: str  # the kit's Python package in its checkout (ppcls, ppocr)
    sections: tuple[str, ...]  # top-level keys that, together, mark its training configs
    one_flag: bool = False  # its tools/train.py takes every override after one -o (argparse nargs="+")
    config_flag: str = "-c"  # its tools/train.py's flags for the config file and the overrides
    option_flag: str = "-o"
    accumulates: bool = True  # False: a smaller batch is a smaller effective batch (PaddleOCR)
    cpu_options: tuple[str, ...] = ()  # the overrides its tools/train.py needs to train on a CPU (it defaults to a GPU)
    cpu_flags: str = ""  # the flags it needs for that instead (PaddleSeg: --device cpu)
    base_key: str | None = None  # the key naming the base files a config inherits (relative to its folder)
    title: str = ""  # its name in words: PaddleOCR
    data_keys: tuple[str, ...] = ()  # the keys naming what its training reads (relative to the checkout)
    output_option: str = ""  # the override naming where its tools/train.py writes (logs, checkpoints)
    output_flag: str = ""  # or the flag (PaddleSeg: --save_dir)

    def evaluated_once(self, steps: int) -> tuple[list[str], str, str] | None:
        """How its tools/train.py is made to evaluate once, right after optimizer step `steps`, where its config
        evaluates: the overrides, its evaluation function ("module:name", which the verification hook reads apart)
        and the key of the evaluation batch; None where it cannot be within a few steps (PaddleClas evaluates at an
        epoch's end) or vramtune does not measure it (PaddleSeg, PaddleDetection)."""
        return None

    def environment(self, checkout: str) -> str:
        """What its tools/train.py needs in front of it to import the kit from its checkout (PaddleSeg: PYTHONPATH=.,
        unless installed); "" for a kit whose tools/train.py puts its checkout on sys.path itself."""
        return ""

    def value(self, text: str) -> Any:
        """A -o value as the kit's tools/train.py reads it."""
        return literal(text)

    def option_text(self, value: Any) -> str:
        """A value as a -o override's text that `value` reads back (a Python literal; a string as it is)."""
        return value if isinstance(value, str) else repr(value)

    def option_arguments(self, options: list[str]) -> list[str]:
        """The -o part of the kit's argv for these overrides."""
        if not options or not self.one_flag:
            return [part for option in options for part in (self.option_flag, option)]
        return [self.option_flag, *options]

    def command_options(self, options: list[str]) -> str:
        """The -o part of the kit's command line for these overrides."""
        import shlex

        return "".join(f" {shlex.quote(part)}" for part in self.option_arguments(options))

    def merged(self, raw: dict[str, Any], path: Path, options: list[str], checkout: Path) -> dict[str, Any]:
        """The config as the kit's tools/train.py in `checkout` reads it: the overrides applied (and its base files
        merged, where it has them)."""
        return apply_options(raw, options, self.value)

    def recognises(self, raw: Any) -> bool:
        return isinstance(raw, dict) and all(key in raw for key in self.sections)

    def checkout(self, config: Path) -> Path:
        """The kit's checkout: the nearest folder above the config holding the kit's package and tools/train.py."""
        for folder in config.resolve().parents:
            if (folder / self.package).is_dir() and (folder / "tools" / "train.py").is_file():
                return folder
        raise KitError(f"{config}: a {self.name} config outside a {self.name} checkout (no folder above it holds "
                       f"{self.package}/ and tools/train.py): vramtune builds the model with the kit's own code")

    def spec(self, raw: dict[str, Any], path: Path, options: list[str]) -> tuple[dict[str, Any], list[str]]:
        """The raw vramtune spec for a config (overrides applied) and warnings for the user."""
        raise NotImplementedError

    def stated(self, raw: dict[str, Any], path: Path, options: list[str]) -> dict[str, Any]:
        """The strategy fields the config states per card, read as the kit reads it (the overrides applied, its base
        files merged): its batch, and its accumulation, AMP and compiling where the kit has keys for them."""
        raise NotImplementedError

    def changes(self, raw: dict[str, Any], tuned: Any, target: int) -> tuple[dict[str, Any], list[str]]:
        """The config's dotted keys a tuned strategy sets (`apply`), and what the user must know (`target`: the
        batch per card the search aimed at)."""
        raise NotImplementedError


def literal(text: str) -> Any:
    """A -o value as the kits read it: a Python literal where it is one, else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def split_option(option: str, parse: Callable[[str], Any] = literal) -> tuple[str, Any]:
    key, equals, text = option.partition("=")
    if not equals or not key:
        raise KitError(f"override {option!r}: must be Key=value (dotted keys, e.g. Global.epochs=1)")
    try:
        return key, parse(text)
    except (ValueError, SyntaxError, yaml.YAMLError) as error:
        raise KitError(f"override {option!r}: its value does not parse as the kit reads it ({error})") from None


def set_key(raw: Any, dotted: str, value: Any) -> None:
    """Set a dotted key (list indices allowed), creating mappings on the way as the kits' overrides do."""
    node = raw
    *parents, last = dotted.split(".")
    for part in parents:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = {}
            node = node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def apply_options(raw: dict[str, Any], options: list[str], parse: Callable[[str], Any] = literal) -> dict[str, Any]:
    """The config with the -o options set, each value read as the kit reads it (`parse`)."""
    for option in options:
        key, value = split_option(option, parse)
        try:
            set_key(raw, key, value)
        except (IndexError, ValueError) as error:
            raise KitError(f"override {option!r}: {error}") from None
    return raw


def get_key(raw: Any, dotted: str, default: Any = None) -> Any:
    node = raw
    for part in dotted.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return default
    return node


@contextlib.contextmanager
def on_path(checkout: str) -> Iterator[None]:
    """The checkout first on sys.path while the kit's modules are imported (child side)."""
    sys.path.insert(0, checkout)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(checkout)


@contextlib.contextmanager
def eager_parameters() -> Iterator[None]:
    """Parameters with memory even under `estimate`'s paddle.LazyGuard, for kit code that a lazy parameter breaks:
    initialisers that fill them in place (ppdet's `set_value` in PPYOLOEHead._init_weights), and paddle.nn's RNNs,
    whose constructor coalesces its weights into one buffer (`flatten_parameters`: Paddle 3.3.1 raises "The
    attribute(concated_ranks) length must be equal to the output tensor number" on lazy ones). A model's bytes,
    in a count's child."""
    from paddle.nn.initializer.lazy_init import lazy_init_helper

    helper = lazy_init_helper()
    lazy = helper.state
    helper.disable()
    try:
        yield
    finally:
        if lazy:
            helper.enable()


class KitEMA:
    """A kit's EMA as its loop runs it: made once (`make`, from the model), updated after every optimizer step (the
    probe calls it there: BuiltModel.after_step). The probe makes it at the first step's end: after vramtune's AMP
    has decorated the model (the kits make theirs after their own AMP's decorate) and before the measured steps,
    whose peak holds it."""

    def __init__(self, make: Callable[[], Any], update: Callable[[Any], None]):
        self.make, self.update = make, update
        self.average: Any = None  # the kit's EMA object, once made

    def __call__(self) -> None:
        if self.average is None:
            self.average = self.make()
        self.update(self.average)


def kit_import_error(kit: str, checkout: str, error: ImportError) -> KitError:
    missing = getattr(error, "name", None) or str(error)
    return KitError(f"{kit} in {checkout} cannot be imported: {error} (install the kit's requirements: pip install "
                    f"-r {checkout}/requirements.txt{'' if not missing else f'; missing: {missing}'})")


class KitSource(Source):
    """A kit's model source: the spec's model: keys are written by the dialect, never by hand."""

    settings = KitModel
    words: ClassVar[dict[str, str]] = {}  # the spec's keys in the search's advice -> the kit's own (its batch)
    terms: ClassVar[str] = ""  # the probe table's and the chosen line's words in the kit's keys

    def notes(self, settings, device_kind):
        return [self.terms] if self.terms else []

    def read(self, model, data):
        settings = KitModel(config=model.get("config", str), checkout=model.get("checkout", str),
                            options=model.get("options", list, []) or [],
                            probe_options=model.get("probe_options", list, []) or [])
        data.finish()
        return settings if settings.config and settings.checkout else None

    def suggestions(self, settings, tips):
        """The advice in the kit's keys and vramtune's flags; what the kit's config cannot say (search_off) left out."""
        unsaid = [f"search.{key}" for key in search_off({})]
        said = [tip for tip in tips if not any(key in tip for key in unsaid)]
        for key, words in {"search.max_accumulation": "--max-accumulation", **self.words}.items():
            said = [tip.replace(key, words) for tip in said]
        return said

    def identity(self, settings, spec_dir):
        """The config's text and the kit's code decide the model: a changed file is a different model."""
        import hashlib

        return {"config_sha256": hashlib.sha256(Path(settings.config).read_bytes()).hexdigest(),
                "checkout": settings.checkout}
