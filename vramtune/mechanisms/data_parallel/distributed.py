"""The Paddle side of data parallel and sharding, shared by both mechanisms: each rank is a worker started by
`paddle.distributed.launch` (vramtune.child.rank says which); this wraps its model, optimizer and loss scaler."""
from __future__ import annotations

from typing import Any

import paddle


def data_parallel(model: paddle.nn.Layer, optimizer: Any, strategy: Any) -> tuple[Any, Any]:
    """Plain data parallel (sharding stage 0): gradients all-reduced over the ranks."""
    if strategy.devices == 1 or strategy.sharding_stage:
        return model, optimizer
    paddle.distributed.init_parallel_env()
    return paddle.DataParallel(model), optimizer


def sharded(model: paddle.nn.Layer, optimizer: Any, strategy: Any) -> tuple[Any, Any]:
    """Stage 1: fleet's sharding optimizer (optimizer state split over the ranks); 2 and 3: group_sharded_parallel."""
    stage = strategy.sharding_stage
    if not stage:
        return model, optimizer
    if stage == 1:
        from paddle.distributed import fleet

        config = fleet.DistributedStrategy()
        try:
            config.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1,
                                     "sharding_degree": strategy.devices}
        except TypeError as error:  # Paddle 2.6 reads FieldDescriptor.label, which protobuf 7 removed
            raise RuntimeError(f"fleet cannot be configured ({error}): Paddle {paddle.__version__}'s fleet needs "
                               "protobuf < 7; pip install 'protobuf<7'") from error
        fleet.init(is_collective=True, strategy=config)
        return fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)
    from paddle.distributed.sharding import group_sharded_parallel

    paddle.distributed.init_parallel_env()
    model, optimizer, _ = group_sharded_parallel(model, optimizer, level="os_g" if stage == 2 else "p_g_os")
    return model, optimizer


def sharded_scaler(scaler: Any, strategy: Any) -> Any:
    """The loss scaler PaddleNLP's Trainer uses under sharding: its inf/nan check agrees across the ranks (the
    gradients are reduced inside optimizer.step, after unscaling), so no rank skips a step the others take."""
    if not strategy.sharding_stage or scaler is None:
        return scaler
    if strategy.sharding_stage == 1:
        from paddle.distributed import fleet

        return fleet.distributed_scaler(scaler)
    from paddle.distributed.fleet.meta_parallel.sharding.group_sharded_utils import GroupShardedScaler

    return GroupShardedScaler(scaler)
