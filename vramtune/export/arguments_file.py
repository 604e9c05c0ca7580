"""`--format arguments` (the default for a PaddleNLP arguments file): the same JSON, every key kept, the tuned ones
replaced with what was measured."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.export.paddlenlp_args import tuned_arguments
from vramtune.export.yaml_spec import tuned_section

NAME, SUFFIX = "arguments", ".tuned.json"


def render(spec_path: Path, spec: Any, report: dict[str, Any]) -> tuple[str, list[str]]:
    tuned, warnings = tuned_arguments(tuned_section(report), spec.train.optimizer, report["device"]["kind"])
    arguments = dict(spec.arguments)
    for key, value in tuned.items():
        arguments[key] = value
    return json.dumps(arguments, indent=2) + "\n", warnings
