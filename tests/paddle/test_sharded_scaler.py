"""fp16 O2 with amp_master_grad under sharding (issue 37, item 6, disproved): vramtune's loss scaler is the Trainer's.
Fleet's wrappers replace `_unscale` with one that reads each parameter's fp32 `main_grad` first
(fleet/scaler.py unscale_method; GroupShardedScaler, group_sharded_utils.py), and the Trainer's MixPrecisionScaler is
overwritten by them, so the scaler sees the master gradients there. On one rank the plain GradScaler (the Trainer's
too) gathers gradients through core.eager.get_grads_lists, which skips the half gradients MixPrecisionLayer clears:
these guard both facts. Real Paddle on CPU; the fleet wrappers are stand-ins (they need initialised ranks)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.paddle


def test_the_plain_scaler_sees_no_gradient_of_a_master_grad_layer_the_fp32_main_grad_holds_it():
    import paddle
    from paddle.base import core
    from paddle.distributed.fleet.utils import mix_precision_utils

    model = mix_precision_utils.MixPrecisionLayer(paddle.nn.Linear(4, 4), dtype="float16")
    (model(paddle.randn([2, 4])) * float("inf")).sum().backward()
    parameters = list(model.parameters())
    assert core.eager.get_grads_lists(parameters) == [[], [], []]  # what GradScaler._unscale reads: nothing
    assert not any(bool(paddle.isfinite(p.main_grad).all()) for p in parameters)  # the inf is in main_grad


@pytest.mark.parametrize("stage, wrapper", [(0, None), (1, "fleet"), (2, "group_sharded"), (3, "group_sharded")])
def test_sharding_wraps_the_scaler_in_fleets_main_grad_aware_scaler(monkeypatch, stage, wrapper):
    from paddle.distributed import fleet
    from paddle.distributed.fleet.meta_parallel.sharding import group_sharded_utils

    from vramtune.core.strategy import Strategy
    from vramtune.mechanisms.data_parallel.distributed import sharded_scaler

    monkeypatch.setattr(fleet, "distributed_scaler", lambda scaler: ("fleet", scaler))
    monkeypatch.setattr(group_sharded_utils, "GroupShardedScaler", lambda scaler: ("group_sharded", scaler))
    scaler = object()
    wrapped = sharded_scaler(scaler, Strategy(devices=2, sharding_stage=stage))
    assert wrapped == (scaler if wrapper is None else (wrapper, scaler))
