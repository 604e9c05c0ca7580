"""A YAML file as the dialects read it: a missing file or a syntax error said with its line, and a kit's local
`!Class` tags (PaddleDetection's `- !CosineDecay` and other registered classes, which the kit constructs as objects)
read Paddle-free as mappings whose `type` is the tag, for the values vramtune needs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vramtune.core.reading import Problem, SpecError, read_spec_text


class TaggedLoader(yaml.SafeLoader):
    """SafeLoader, with every `!Name` tag read as `{"type": "!Name", **its mapping}`."""


def _tagged(loader: yaml.SafeLoader, tag: str, node: yaml.Node) -> dict[str, Any]:
    mapping = loader.construct_mapping(node, deep=True) if isinstance(node, yaml.MappingNode) else {}
    return {"type": f"!{tag}", **mapping}


TaggedLoader.add_multi_constructor("!", _tagged)


def safe_load(text: Any) -> Any:
    """yaml.safe_load, with the tags read as mappings."""
    return yaml.load(text, Loader=TaggedLoader)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing file or a syntax error becomes a SpecError with the line."""
    file = str(path)
    text = read_spec_text(Path(path))
    try:
        raw = safe_load(text)  # a kit's `!Class` tags (PaddleDetection) read as mappings
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError([Problem(file, "", f"{where}YAML syntax error: {problem}")]) from None
    if raw is None:
        raise SpecError([Problem(file, "", "is empty")])
    return raw
