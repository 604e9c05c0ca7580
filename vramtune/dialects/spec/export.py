"""`--format yaml`: the original spec text (comments and key order kept) plus a `tuned:` section."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from vramtune.core.report import Report, Tuned

NAME, SUFFIX = "yaml", ".tuned.yaml"
ACCEPTED = None  # vramtune's own reader says every measured configuration
HEADER = "# tuned by vramtune: measured, fits the budget; `vramtune check` this file in CI\n"
_TOP_LEVEL_TUNED = re.compile(r"^tuned\s*:.*?(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


def tuned_yaml(spec_text: str, section: dict[str, Any]) -> str:
    """The spec text with any old `tuned:` block (and its header comment) replaced by the new one at the end."""
    body = _TOP_LEVEL_TUNED.sub("", spec_text).rstrip("\n")
    body = body.removesuffix(HEADER.rstrip("\n")).rstrip("\n")
    block = yaml.safe_dump({"tuned": section}, sort_keys=False, default_flow_style=False)
    return f"{body}\n\n{HEADER}{block}"


def render(spec_path: Path, spec: Any, report: Report, tuned_file: str) -> tuple[str, list[str]]:
    return tuned_yaml(spec_path.read_text(encoding="utf-8"), Tuned.of(report).to_json()), []
