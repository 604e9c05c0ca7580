"""`--format arguments` (the default for a PaddleNLP arguments file): the same file with only the tuned keys' values
changed (edited in place: every other key, the order and the layout kept); only keys PaddleNLP's llm scripts'
parser reads are added, and a key the tuning clears (None: e.g. no_recompute_layers when every layer is
recomputed) is removed, since PdArgumentParser reads a JSON null as the string "None"."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vramtune.core.report import Report, Tuned
from vramtune.dialects.paddlenlp.export import accepted_only, tuned_arguments
from vramtune.dialects.paddlenlp.keys import KNOWN
from vramtune.dialects.roundtrip import DELETE, set_keys

NAME, SUFFIX = "arguments", ".tuned.json"
ACCEPTED = KNOWN  # the llm scripts' PdArgumentParser: TrainingArguments and their model, data, quantization and
#                   generation arguments
_ABSENT = object()


def render(spec_path: Path, spec: Any, report: Report, tuned_file: str) -> tuple[str, list[str]]:
    tuned, warnings = tuned_arguments(Tuned.of(report), spec.train.optimizer)
    kept, left_out = accepted_only(tuned, ACCEPTED, "the llm scripts' PdArgumentParser")
    changes = {key: DELETE if value is None else value for key, value in kept.items()
               if spec.arguments.get(key, _ABSENT) != value}
    text, _ = set_keys(spec_path.read_text(encoding="utf-8"), changes, kind="json")
    return text, warnings + left_out
