"""The kinds of Paddle layers memory depends on, in one place: the probe's BatchNorm floor and the estimate's counts
(what AMP O2 keeps in fp32, what AMP O1 copies to half) must agree on them; and a model configuration's depth.
Child-side (it imports Paddle): the child's count and a mechanism's child-side hook import it, the parent never
does."""
from __future__ import annotations

from typing import Any

import paddle
from paddle.nn.layer.norm import _BatchNormBase

# BatchNorm1D/2D/3D and SyncBatchNorm derive from _BatchNormBase; the older paddle.nn.BatchNorm does not
BATCHNORM = (_BatchNormBase, paddle.nn.BatchNorm)
LAYERNORM = (paddle.nn.LayerNorm, paddle.nn.InstanceNorm1D, paddle.nn.InstanceNorm2D, paddle.nn.InstanceNorm3D)
MATMUL = (paddle.nn.Linear, paddle.nn.Conv1D, paddle.nn.Conv2D, paddle.nn.Conv3D)


def layer_count(config: Any) -> int:
    """The repeated layers a PaddleNLP or PaddleFormers model configuration says it has (0: none said)."""
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "num_layers", 0) or 0)
