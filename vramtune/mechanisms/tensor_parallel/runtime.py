"""The Paddle side of tensor parallelism, in the probe child only: fleet's hybrid group, the CPU stand-ins
(cpu_stand_ins.py, on a CPU), the model's configuration split, and the Trainer's wrappers."""
from __future__ import annotations

from typing import Any

import paddle


def configure(config: Any, strategy: Any) -> None:
    """fleet initialised over the tensor-parallel ranks where nothing did it before (PaddleFormers' argument
    parsing does, with the file's degrees), with each rank building its own batch on a CPU; the model's
    configuration told the degree and sequence parallelism."""
    from paddle.distributed import fleet

    on_cpu = paddle.get_device() == "cpu"
    if on_cpu:
        from vramtune.mechanisms.tensor_parallel import cpu_stand_ins

        cpu_stand_ins.install()
        cpu_stand_ins.no_broadcast_data()
    if fleet.fleet._hcg is None:  # nothing initialised fleet's hybrid group yet
        hybrid = fleet.DistributedStrategy()
        hybrid.hybrid_configs = {"dp_degree": strategy.devices, "mp_degree": strategy.tensor_parallel,
                                 "pp_degree": 1, "mp_configs": {"need_broadcast_data": not on_cpu}}
        fleet.init(is_collective=True, strategy=hybrid)
    degree = fleet.get_hybrid_communicate_group().get_model_parallel_world_size()
    if degree != strategy.tensor_parallel:
        raise RuntimeError(f"fleet's hybrid group has {degree} tensor-parallel ranks, the strategy "
                           f"{strategy.tensor_parallel}")
    config.tensor_model_parallel_size = strategy.tensor_parallel
    config.sequence_parallel = strategy.sequence_parallel


def distributed(model: Any, optimizer: Any) -> tuple[Any, Any]:
    """As PaddleFormers' Trainer wraps a tensor-parallel model: fleet's TensorParallel and HybridParallelOptimizer."""
    from paddle.distributed import fleet

    return fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)
