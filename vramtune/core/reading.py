"""A generic, strict reader for one mapping of a spec: it records problems instead of raising, so every
problem in a file is reported at once, each with its dotted key and a did-you-mean."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vramtune.core.text import did_you_mean

REQUIRED = object()
KINDS: dict[type, str] = {int: "an integer", float: "a number", str: "a string", list: "a list",
                          dict: "a mapping", bool: "true or false"}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec (or a flag): where, and what is allowed."""

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


class Section:
    """Reads one mapping of the spec, recording problems instead of raising."""

    def __init__(self, problems: list[Problem], file: str, prefix: str, data: Any):
        self.problems, self.file, self.prefix = problems, file, prefix
        self.seen: set[str] = set()
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail("", f"must be a mapping, got {describe(data)}")
            data = {}
        self.data = data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def fail(self, name: str, message: str) -> None:
        key = self.key(name) if name else self.prefix
        self.problems.append(Problem(self.file, key, message))

    def get(self, name: str, kind: type, default: Any = REQUIRED, *, choices: tuple | None = None,
            check: Callable[[Any], str | None] | None = None) -> Any:
        self.seen.add(name)
        if name not in self.data or self.data[name] is None:
            if default is REQUIRED:
                self.fail(name, "is required")
                return None
            return default
        value = self.data[name]
        if not is_kind(value, kind):
            self.fail(name, f"must be {KINDS[kind]}, got {describe(value)}")
            return None
        if choices is not None and value not in choices:
            allowed = ", ".join(map(str, choices))
            self.fail(name, f"must be one of {allowed}; got {value!r}{did_you_mean(value, choices)}")
            return None
        if check is not None:
            message = check(value)
            if message:
                self.fail(name, message)
                return None
        return float(value) if kind is float else value

    def sub(self, name: str, required: bool = False) -> Section | None:
        """The nested section; None (after one problem) when a required one is missing."""
        self.seen.add(name)
        if required and self.data.get(name) is None:
            self.fail(name, "is required")
            return None
        return Section(self.problems, self.file, self.key(name), self.data.get(name))

    def skip_rest(self) -> None:
        """Accept every key unjudged (the section's kind is already reported wrong)."""
        self.seen.update(self.data)

    def finish(self) -> None:
        """Report keys nobody asked for, with a did-you-mean."""
        for name in self.data:
            if name not in self.seen:
                self.fail(str(name), f"unknown key{did_you_mean(name, self.seen)}")


def read_spec_text(path: Path) -> str:
    """A spec file's text; a missing or unreadable file is a SpecError."""
    file = str(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(file, "", "no such file")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(file, "", "is a directory, not a spec file")]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError([Problem(file, "", f"cannot be read: {error}")]) from None


def is_kind(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def describe(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)
    return f"{kind} ({value!r})" if not isinstance(value, (dict, list)) else kind


def switched_on(value: Any) -> bool:
    """A flag's value that switches something on, as PaddleNLP's and PaddleFormers' files say it ("no", "none" and
    "false" do not)."""
    return bool(value) and value not in ("no", "none", "false", "False")


def refuse_when_on(section: Section, key: str, what_to_do: str) -> None:
    """A key that, switched on, changes memory in a way vramtune does not measure: read (nothing refuses it again)
    and, when on, refused by name with what to do."""
    value = section.data.get(key)
    section.seen.add(key)
    if switched_on(value):
        section.fail(key, f"{value!r} changes memory: {what_to_do}")


def positive(limit: int | None = None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value <= 0:
            return f"must be positive, got {value}"
        if limit is not None and value > limit:
            return f"must be at most {limit}, got {value}"
        return None
    return check


@dataclass
class Sections:
    """The spec's sections a mechanism may read its keys from (each records its own problems)."""

    root: Section
    model: Section
    train: Section
    search: Section
