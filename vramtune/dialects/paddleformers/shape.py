"""What the search's activation prior (search/activations.py) asks of a PaddleFormers model: the model folder (its
config.json), the sequence length a probe measures and the attention implementation the run asks for."""
from __future__ import annotations

from typing import Any

from vramtune.dialects.paddleformers.source import FormersModel


def model_shape(model: Any) -> tuple[str, int, str] | None:
    """(folder, sequence length, _attn_implementation) of a PaddleFormers model; None for another source's model."""
    if not isinstance(model, FormersModel):
        return None
    return model.folder, model.seq_len, str(model.arguments.get("_attn_implementation", "flashmask"))
