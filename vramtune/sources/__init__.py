"""The registry of model sources. Adding one: its module (settings + builder), its tests, one line here."""
from __future__ import annotations

from vramtune.dialects.kits import paddleclas, paddledetection, paddleocr, paddleseg
from vramtune.dialects.paddleformers import source as paddleformers
from vramtune.sources import paddlenlp, python, vision
from vramtune.sources.base import Source

SOURCES: dict[str, Source] = {source.name: source for source in (paddlenlp.SOURCE, vision.SOURCE, python.SOURCE,
                                                                 paddleclas.SOURCE, paddleocr.SOURCE, paddleseg.SOURCE,
                                                                 paddledetection.SOURCE, paddleformers.SOURCE)}

__all__ = ["SOURCES", "Source"]
