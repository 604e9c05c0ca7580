"""A PaddleNLP arguments file (the JSON PaddleNLP's llm scripts and Trainer scripts take): read as a spec
(reading.py, keys.py), written back as itself (arguments_file.py); any spec can also be written as TrainingArguments
JSON for a Trainer script of the user's own (export.py, `--format paddlenlp`)."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from vramtune.core.spec import Spec
from vramtune.dialects.base import Dialect, Format, Reading
from vramtune.dialects.paddlenlp import arguments_file, codec, export
from vramtune.dialects.paddlenlp.reading import read_arguments, spec_from_arguments


def _needs_arguments(spec_path: Path, spec: Spec) -> str | None:
    if spec.arguments is None:
        return f"--format arguments needs a PaddleNLP arguments file (.json); {spec_path} is a YAML spec"
    return None


def _read(path: Path, options: list[str], read_data: bool) -> Reading:
    arguments = read_arguments(path)
    raw, warnings = spec_from_arguments(arguments, str(path))
    return Reading(raw, warnings, arguments)


FORMAT = Format(arguments_file.NAME, arguments_file.SUFFIX, arguments_file.render,
                trained_by="for PaddleNLP's llm scripts", refuses=_needs_arguments,
                inexpressible=partial(codec.inexpressible, accepted=arguments_file.ACCEPTED),
                expressible_neighbour=codec.expressible_neighbour)
TRAINING_ARGUMENTS = Format(export.NAME, export.SUFFIX, export.render,
                            inexpressible=partial(codec.inexpressible, accepted=export.ACCEPTED),
                            expressible_neighbour=codec.expressible_neighbour)
DIALECT = Dialect("paddlenlp", FORMAT, recognises=lambda path: path.suffix == ".json", read=_read,
                  per_rank_batch=True, formats=(TRAINING_ARGUMENTS,), stated=codec.stated)
