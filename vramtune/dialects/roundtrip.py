"""Writing the user's own config back with only the tuned keys changed.

A tuned file must load in the user's tool and read like the file they wrote, so the text is edited in place rather
than re-dumped: the file is composed (not constructed) to find where each changed value stands, and only those
characters are replaced. Comments, key order, quoting, indentation and every other byte stay as they were. An
anchored value (`first_bs: &bs 8`, aliased as `batch_size_per_card: *bs`) keeps its anchor, so every alias follows
the new value; the keys that change with it are returned so the caller can say so. JSON is edited the same way (a
JSON document is YAML to the composer), with values written as JSON.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

DELETE = object()  # a change's value that removes the key


class RoundTripError(ValueError):
    """The change cannot be made in place (a path through a value that is not a mapping or list, ...)."""


def set_keys(text: str, changes: Mapping[str, Any], kind: str = "yaml") -> tuple[str, list[str]]:
    """Apply dotted-key changes (`Train.sampler.first_bs`, a number indexes a list) to a YAML or JSON text.

    Missing keys are added at the end of their mapping (missing parents are not created). Returns the new text and
    the dotted keys that changed too because they alias a changed anchored value."""
    if kind == "json" and not _composes(text):  # YAML rejects what JSON allows (a tab-indented file)
        return _set_json(text, changes), []
    followers: list[str] = []
    for dotted, value in changes.items():
        text, more = _set_one(text, dotted, value, kind)
        followers.extend(key for key in more if key not in changes and key not in followers)
    return text, followers


def _set_one(text: str, dotted: str, value: Any, kind: str) -> tuple[str, list[str]]:
    root = _compose(text)
    *parents, last = dotted.split(".")
    parent = _descend(root, parents, dotted)
    if isinstance(parent, yaml.SequenceNode) and value is not DELETE:
        node = _descend(parent, [last], dotted)
    elif isinstance(parent, yaml.MappingNode):
        entry = next(((key, node) for key, node in parent.value if key.value == last), None)
        if entry is None:
            return (text, []) if value is DELETE else (_insert(text, parent, last, value, kind), [])
        key_node, node = entry
        if value is DELETE:
            return _delete(text, parent, key_node, node, kind), []
    else:
        raise RoundTripError(f"{dotted}: {'.'.join(parents) or 'the file'} is not a mapping")
    followers = [path for path, other in _walk(root, "") if other is node and path != dotted]
    start, end = node.start_mark.index, node.end_mark.index
    anchor = _anchor_prefix(text[start:end])
    return text[:start] + anchor + value_text(value, kind) + text[end:], followers


def _composes(text: str) -> bool:
    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return False
    return True


def _set_json(text: str, changes: Mapping[str, Any]) -> str:
    """The changes made on the parsed JSON, dumped again in the file's key order and indentation (tabs stay tabs):
    for a JSON text the YAML composer cannot read."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise RoundTripError(f"the file no longer parses: {error}") from None
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = _json_child(node, part)
            if node is None:
                raise RoundTripError(f"{dotted}: {part!r} is not in the file")
        if isinstance(node, list) and value is not DELETE and _json_child(node, last) is not None:
            node[int(last)] = value
        elif not isinstance(node, dict):
            raise RoundTripError(f"{dotted}: {'.'.join(parents) or 'the file'} is not a mapping")
        elif value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    indent = re.search(r"\n([ \t]+)\S", text)
    dumped = json.dumps(data, indent=indent.group(1) if indent else None, ensure_ascii=False)
    return dumped + text[len(text.rstrip()):]


def _json_child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def _compose(text: str) -> yaml.Node:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise RoundTripError(f"the file no longer parses: {error}") from None
    if root is None:
        raise RoundTripError("the file is empty")
    return root


def _descend(node: yaml.Node, parts: list[str], dotted: str) -> yaml.Node:
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            found = next((value for key, value in node.value if key.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            found = node.value[int(part)]
        else:
            found = None
        if found is None:
            raise RoundTripError(f"{dotted}: {part!r} is not in the file")
        node = found
    return node


def _walk(node: yaml.Node, path: str, seen: frozenset[int] = frozenset()) -> Iterator[tuple[str, yaml.Node]]:
    """Every (dotted path, node) below `node`; an aliased node is reached once per path that names it."""
    if id(node) in seen:
        return
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = f"{path}.{key.value}" if path else str(key.value)
            yield child, value
            yield from _walk(value, child, seen | {id(node)})
    elif isinstance(node, yaml.SequenceNode):
        for index, value in enumerate(node.value):
            child = f"{path}.{index}" if path else str(index)
            yield child, value
            yield from _walk(value, child, seen | {id(node)})


def _anchor_prefix(source: str) -> str:
    """`&bs ` when the value's text starts with an anchor (kept so that its aliases follow)."""
    if not source.startswith("&"):
        return ""
    name = source.split(maxsplit=1)[0]
    return name + " "


def value_text(value: Any, kind: str = "yaml") -> str:
    """A value as one line of the file's kind (a YAML flow scalar or collection, or JSON)."""
    if kind == "json":
        return json.dumps(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def _insert(text: str, mapping: yaml.MappingNode, key: str, value: Any, kind: str) -> str:
    if mapping.flow_style or kind == "json":
        close = mapping.end_mark.index - 1  # the closing brace
        body = text[:close].rstrip()
        indent = _json_indent(text, mapping)
        separator = "," if mapping.value else ""
        entry = f"{json.dumps(key) if kind == 'json' else key}: {value_text(value, kind)}"
        newline = f"\n{indent}" if indent is not None else " "
        closing = text[len(body):close] if indent is not None else " "
        return body + separator + newline + entry + closing + text[close:]
    if not mapping.value:
        raise RoundTripError(f"cannot add {key!r} to an empty block mapping")
    column = mapping.value[0][0].start_mark.column
    last_end = _deepest_end(mapping.value[-1][1])
    at = _line_end(text, last_end)
    return text[:at] + "\n" + " " * column + f"{key}: {value_text(value, kind)}" + text[at:]


def _json_indent(text: str, mapping: yaml.MappingNode) -> str | None:
    """The indentation of the mapping's entries when they stand one per line, else None (an inline object)."""
    if not mapping.value:
        return None
    first = mapping.value[0][0].start_mark
    if first.line == mapping.start_mark.line:
        return None
    return " " * first.column


def _deepest_end(node: yaml.Node) -> int:
    """Where a value's own text ends: a block collection's end mark lies at the next token, so take its last
    scalar's end instead."""
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node.end_mark.index


def _delete(text: str, mapping: yaml.MappingNode, key: yaml.Node, value: yaml.Node, kind: str) -> str:
    if kind == "json" or mapping.flow_style:
        entries = mapping.value
        index = next(i for i, (k, _) in enumerate(entries) if k is key)
        start, end = key.start_mark.index, value.end_mark.index
        if index + 1 < len(entries):  # up to the next entry, with the comma between
            end = entries[index + 1][0].start_mark.index
        elif index > 0:  # from the end of the previous entry, with the comma before
            start = entries[index - 1][1].end_mark.index
        return text[:start] + text[end:]
    start = text.rfind("\n", 0, key.start_mark.index) + 1
    end = _line_end(text, _deepest_end(value))
    return text[:start] + text[end + 1:]
