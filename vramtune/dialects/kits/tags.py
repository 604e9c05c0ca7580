"""YAML with a kit's local `!Class` tags (PaddleDetection's `- !CosineDecay` and other registered classes, which the
kit constructs as objects): read Paddle-free as mappings whose `type` is the tag, for the values vramtune needs."""
from __future__ import annotations

from typing import Any

import yaml


class TaggedLoader(yaml.SafeLoader):
    """SafeLoader, with every `!Name` tag read as `{"type": "!Name", **its mapping}`."""


def _tagged(loader: yaml.SafeLoader, tag: str, node: yaml.Node) -> dict[str, Any]:
    mapping = loader.construct_mapping(node, deep=True) if isinstance(node, yaml.MappingNode) else {}
    return {"type": f"!{tag}", **mapping}


TaggedLoader.add_multi_constructor("!", _tagged)


def safe_load(text: Any) -> Any:
    """yaml.safe_load, with the tags read as mappings."""
    return yaml.load(text, Loader=TaggedLoader)
