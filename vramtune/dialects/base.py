"""What a config dialect declares: a tool's training file, recognised, read into a spec (every problem at once) and
written back, and the formats `vramtune apply` writes. One folder each (dialects/NAME/dialect.py); the composition
root (vramtune/plugins.py) lists them, in the order files are recognised.

A dialect names Strategy fields and precision values freely: they are the vocabulary its keys translate to."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from vramtune.core.report import Report, Tuned
from vramtune.core.spec import Spec
from vramtune.core.strategy import Strategy

Render = Callable[[Path, Spec, Report, str], "tuple[str, list[str]]"]


@dataclass
class Reading:
    """A file read as a spec: the raw spec (as a vramtune YAML spec says it), what the user should know, and a
    PaddleNLP arguments file's own keys (what `--format arguments` edits)."""

    raw: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    arguments: dict[str, Any] | None = None


def _writes_any(spec_path: Path, spec: Spec) -> str | None:
    return None


def _written_by_any(format_name: str, spec_path: Path) -> str | None:
    return None


@dataclass(frozen=True)
class Format:
    """An output format of `vramtune apply --format NAME`: the text it writes for a tuning report (and the warnings
    to show), where it is written by default, and which files it can write."""

    name: str
    suffix: str
    render: Render  # (spec_path, spec, report, tuned_file) -> (text, warnings); tuned_file names the file written
    trained_by: str | None = None  # what trains the file it writes ("for the kit's own tools/train.py")
    refuses: Callable[[Path, Spec], str | None] = _writes_any  # why it cannot write this file (what it needs)
    prefer: Callable[[Spec, Report], tuple[Report, list[str]]] | None = None  # its own choice among the fitting
    output_name: Callable[[Path], str] | None = None  # the default output's file name; None: the stem + suffix
    # why the file it writes cannot train a configuration as measured (its parser has no key for a tuned value), or
    # None; `apply` then exports the fastest measured one it can say. None: it says every measured configuration
    inexpressible: Callable[[Tuned], str | None] | None = None
    # the configuration next to an inexpressible one that its file can say, for `apply` to measure when no saved
    # probe stands in for it (None: none)
    expressible_neighbour: Callable[[Tuned], Strategy | None] | None = None


@dataclass(frozen=True)
class Dialect:
    """A tool's training file: how it is recognised and read, and the format that writes it back."""

    name: str
    format: Format  # its own format: `apply`'s default for its files
    recognises: Callable[[Path], bool]  # by the file's name or content (a broken file: False, the reader says why)
    read: Callable[[Path, list[str], bool], Reading]  # (path, the tool's own key=value overrides, read the data)
    takes_options: bool = False  # its files take the tool's own key=value overrides (-O, or after the file)
    per_rank_batch: bool = False  # its batch is per rank: with N devices the target batch is N times it
    formats: tuple[Format, ...] = ()  # formats it offers other files besides (PaddleNLP's TrainingArguments JSON)
    refuses: Callable[[str, Path], str | None] = _written_by_any  # why another format cannot write its files
    # the strategy a file of its states (what `check` and `measure` read), for a probe on this kind of device (a CPU
    # runs fp32 whatever the file's precision); None: its files carry a tuned: section (vramtune's own spec)
    stated: Callable[[Spec, str], Strategy] | None = None
