"""`--format arguments` (the default for a PaddleNLP arguments file): the same JSON, every key kept, the tuned ones
replaced with what was measured; only keys PaddleNLP's llm scripts' parser reads are added."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.export.paddlenlp_args import accepted_only, tuned_arguments
from vramtune.report import Report, Tuned
from vramtune.spec.paddlenlp_keys import KNOWN

NAME, SUFFIX = "arguments", ".tuned.json"
ACCEPTED = KNOWN  # the llm scripts' PdArgumentParser: TrainingArguments and their model, data, quantization and
#                   generation arguments


def render(spec_path: Path, spec: Any, report: Report) -> tuple[str, list[str]]:
    tuned, warnings = tuned_arguments(Tuned.of(report), spec.train.optimizer)
    kept, left_out = accepted_only(tuned, ACCEPTED, "the llm scripts' PdArgumentParser")
    return json.dumps({**spec.arguments, **kept}, indent=2) + "\n", warnings + left_out
