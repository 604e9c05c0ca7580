"""`--format yaml`: the original spec text (comments and key order kept) plus a `tuned:` section."""
from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import yaml

from vramtune import __version__
from vramtune.strategy import Strategy

NAME, SUFFIX = "yaml", ".tuned.yaml"
HEADER = "# tuned by vramtune: measured, fits the budget; `vramtune check` this file in CI\n"
_TOP_LEVEL_TUNED = re.compile(r"^tuned\s*:.*?(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


def tuned_section(report: dict[str, Any]) -> dict[str, Any]:
    """What `apply` records about the choice, and what `check` and `vramtune.runtime` read back."""
    chosen = report["chosen"]
    return {
        **Strategy.from_json(chosen).to_json(),
        "total_blocks": chosen.get("total_blocks"),
        "block_path": chosen.get("block_path"),
        "recompute_options": chosen.get("recompute_options"),
        "peak_bytes": chosen["peak_bytes"],
        "reserved_bytes": chosen["reserved_bytes"],
        "budget_bytes": report["budget_bytes"],
        "headroom": report["headroom"],
        "samples_per_sec": round(chosen["samples_per_sec"], 2),
        "device": report["device"]["name"],
        "device_kind": report["device"]["kind"],
        "paddle_version": report["paddle_version"],
        "vramtune_version": __version__,
        "date": datetime.date.today().isoformat(),
    }


def tuned_yaml(spec_text: str, section: dict[str, Any]) -> str:
    """The spec text with any old `tuned:` block (and its header comment) replaced by the new one at the end."""
    body = _TOP_LEVEL_TUNED.sub("", spec_text).rstrip("\n")
    body = body.removesuffix(HEADER.rstrip("\n")).rstrip("\n")
    block = yaml.safe_dump({"tuned": section}, sort_keys=False, default_flow_style=False)
    return f"{body}\n\n{HEADER}{block}"


def render(spec_path: Path, spec: Any, report: dict[str, Any]) -> tuple[str, list[str]]:
    return tuned_yaml(spec_path.read_text(encoding="utf-8"), tuned_section(report)), []
