"""The composition root: the one module that imports the implementations and lists them — the memory mechanisms,
the model sources and the config dialects. Adding one: its folder, its tests, one line here.

The dialects' order is the order a file is recognised in (a PaddleFormers config, JSON or YAML, before a PaddleNLP
arguments file; vramtune's own spec last: it takes any YAML).

The mechanisms' order is the order of application: the child applies each hook (configure, prepare_model,
prepare_training, forward contexts, the loss scaler) mechanism by mechanism in this order, so AMP O2's decorate wraps
before data parallel and sharding, as PaddleNLP's Trainer does, and to_static compiles last; the tie rule follows it
too."""
from __future__ import annotations

from vramtune.dialects.base import Dialect, Format
from vramtune.dialects.kits import dialect as kits
from vramtune.dialects.kits import paddleclas, paddledetection, paddleocr, paddleseg
from vramtune.dialects.paddleformers import dialect as formers_dialect
from vramtune.dialects.paddleformers import source as paddleformers
from vramtune.dialects.paddlenlp import dialect as paddlenlp_dialect
from vramtune.dialects.spec import dialect as spec_dialect
from vramtune.mechanisms import (
    accumulation,
    data_parallel,
    evaluation,
    peft,
    precision,
    recompute,
    sharding,
    static_graph,
    tensor_parallel,
)
from vramtune.mechanisms.base import Mechanism
from vramtune.sources import paddlenlp, python, vision
from vramtune.sources.base import Source

MECHANISMS: tuple[Mechanism, ...] = (peft.MECHANISM, precision.MECHANISM, accumulation.MECHANISM,
                                     recompute.MECHANISM, data_parallel.MECHANISM, sharding.MECHANISM,
                                     tensor_parallel.MECHANISM, static_graph.MECHANISM, evaluation.MECHANISM)
BY_NAME: dict[str, Mechanism] = {mechanism.name: mechanism for mechanism in MECHANISMS}
SOURCES: dict[str, Source] = {source.name: source for source in (
    paddlenlp.SOURCE, vision.SOURCE, python.SOURCE, paddleclas.SOURCE, paddleocr.SOURCE, paddleseg.SOURCE,
    paddledetection.SOURCE, paddleformers.SOURCE)}

DIALECTS: tuple[Dialect, ...] = (formers_dialect.DIALECT, paddlenlp_dialect.DIALECT, kits.DIALECT, spec_dialect.DIALECT)
FORMATS: dict[str, Format] = {f.name: f for dialect in DIALECTS for f in (dialect.format, *dialect.formats)}
