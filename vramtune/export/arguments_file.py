"""`--format arguments` (the default for a PaddleNLP arguments file): the same JSON, every key kept, the tuned ones
replaced with what was measured."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.export.paddlenlp_args import tuned_arguments
from vramtune.report import Report, Tuned

NAME, SUFFIX = "arguments", ".tuned.json"


def render(spec_path: Path, spec: Any, report: Report) -> tuple[str, list[str]]:
    tuned, warnings = tuned_arguments(Tuned.of(report), spec.train.optimizer)
    return json.dumps({**spec.arguments, **tuned}, indent=2) + "\n", warnings
