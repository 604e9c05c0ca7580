"""Paddle's training kits (PaddleClas, PaddleOCR, PaddleSeg, PaddleDetection): a kit's training config, in the
user's checkout of the kit, read as a spec; probes build the kit's own model and loss from it; `apply` writes the
same file back.

One module per kit (`paddleclas.py`, `paddleocr.py`, `paddleseg.py`, `paddledetection.py`) declares how to recognise
its configs, the spec a config becomes, the strategy it states (`check`, `measure`), its model source (the child
side) and the config keys a tuned strategy sets; what they share: `config.py` (finding the checkout, the kit's
`-o Key=value` overrides, dotted keys), `codec.py` (the memory keys the kits share, both ways, in the Strategy's
vocabulary), `spec.py` (the spec's common parts, the batch-only spec, apply's advice), `source.py` (the child's
build under the checkout, the report's note in the kit's keys), `loader.py` (what the kit's DataLoader reads ahead);
`ocr_ema.py` is PaddleOCR's EMA with the copies of the state its swaps leave, `tags.py` PaddleDetection's `!Class`
tags."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import vramtune.sources  # noqa: F401  the source registry imports the kit modules: load it first
from vramtune.core.reading import Problem, SpecError
from vramtune.dialects.kits import paddleclas, paddledetection, paddleocr, paddleseg
from vramtune.dialects.kits.config import Kit, KitError

KITS: dict[str, Kit] = {kit.name: kit for kit in (paddleclas.KIT, paddleocr.KIT, paddleseg.KIT, paddledetection.KIT)}

__all__ = ["KITS", "Kit", "KitError", "kit_of", "kit_spec", "kit_stated"]


def kit_of(raw: Any) -> Kit | None:
    """The kit whose training config this parsed YAML is, if any."""
    return next((kit for kit in KITS.values() if kit.recognises(raw)), None)


def kit_spec(kit: Kit, raw: dict[str, Any], path: Path, options: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The vramtune spec a kit config becomes; KitError as the spec's one problem."""
    with as_problem(path):
        return kit.spec(raw, path, options)


def kit_stated(kit: Kit, raw: dict[str, Any], path: Path, options: list[str]) -> dict[str, Any]:
    """The strategy fields a kit config states per card (Kit.stated); KitError as the spec's one problem."""
    with as_problem(path):
        return kit.stated(raw, path, options)


@contextlib.contextmanager
def as_problem(path: Path) -> Iterator[None]:
    """A KitError raised inside as the file's one problem (a SpecError)."""
    try:
        yield
    except KitError as error:
        raise SpecError([Problem(str(path), "", str(error).removeprefix(f"{path}: "))]) from None
