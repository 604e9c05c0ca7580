"""`--format arguments` (the default for a PaddleNLP arguments file): the same JSON, every key kept, the tuned ones
replaced with what was measured; only keys PaddleNLP's llm scripts' parser reads are added, and a key the tuning
clears (None: e.g. no_recompute_layers when every layer is recomputed) is removed, since PdArgumentParser reads a
JSON null as the string "None"."""
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
    cleared = {key for key, value in kept.items() if value is None}
    written = {key: value for key, value in {**spec.arguments, **kept}.items() if key not in cleared}
    return json.dumps(written, indent=2) + "\n", warnings + left_out
