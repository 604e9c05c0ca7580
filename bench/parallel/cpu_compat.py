"""What the bench's children need beyond the tensor-parallel stand-ins (vramtune/mechanisms/tensor_parallel/
cpu_stand_ins.py, imported from there: `install`, `no_broadcast_data`): sharding stages 2 and 3 built on a CPU
(`group_sharded`), for bench/parallel_ranks.py's rank processes only; never in a file vramtune writes."""
from __future__ import annotations

import os
import sys

import paddle
from paddle.base import core

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from vramtune.mechanisms.tensor_parallel.cpu_stand_ins import install, no_broadcast_data

__all__ = ["group_sharded", "install", "no_broadcast_data"]


class _CoreOnCpu:
    """Paddle's `core` as group-sharded parallel's modules see it on a CPU build: `is_compiled_with_cuda()` true, so
    their GPU-or-XPU asserts pass; every other attribute Paddle's own."""

    def __getattr__(self, name):
        return getattr(core, name)

    @staticmethod
    def is_compiled_with_cuda() -> bool:
        return True


def group_sharded(model, optimizer, stage: int, segment_size: int = 2**20):
    """Sharding stage 2 or 3 over every rank, as `paddle.distributed.sharding.group_sharded_parallel` builds it
    (GroupShardedOptimizerStage2 + GroupShardedStage2, or GroupShardedStage3), which asserts a GPU: built here with
    device "cpu", their modules' `core` answering is_compiled_with_cuda() (_CoreOnCpu) and `paddle.get_device()`
    "cpu:0" (they parse a device id from it). Their buffers, slices and gathers are the same code as on a GPU, on the
    CPU place. Stage 3 slices only parameters of more than `segment_size` elements (group_sharded_parallel's
    default, which PaddleFormers' Trainer keeps, 2**20): the rest stay whole on every rank."""
    from paddle.distributed.fleet.meta_parallel.sharding import (
        group_sharded_optimizer_stage2,
        group_sharded_stage2,
        group_sharded_stage3,
        group_sharded_storage,
        group_sharded_utils,
    )

    for module in (group_sharded_optimizer_stage2, group_sharded_stage2, group_sharded_stage3, group_sharded_storage,
                   group_sharded_utils):
        module.core = _CoreOnCpu()
    paddle.get_device = lambda: "cpu:0"
    # the storages copy each parameter into their buffer through `param.cpu()` then clear the parameter's data
    # (convert_gpu): on a CPU `cpu()` is the parameter itself, cleared before it is copied; copied directly instead
    # cvt_to_device moves a storage's buffer to the device (the host copy freed): on a CPU it is there already
    group_sharded_storage.cvt_to_device = lambda x, dev_id, blocking=True: x
    add_param_as_view = group_sharded_storage.ParamStorage._add_param_as_view
    group_sharded_storage.ParamStorage._add_param_as_view = \
        lambda self, param, align, convert_gpu=True: add_param_as_view(self, param, align, False)
    group = paddle.distributed.new_group(list(range(paddle.distributed.get_world_size())))
    if stage == 2:
        optimizer = group_sharded_optimizer_stage2.GroupShardedOptimizerStage2(
            params=optimizer._parameter_list, optim=optimizer, group=group, device="cpu")
        model = group_sharded_stage2.GroupShardedStage2(model, optimizer, group=group, device="cpu")
    else:
        model = group_sharded_stage3.GroupShardedStage3(model, optimizer=optimizer, group=group, device="cpu",
                                                        segment_size=segment_size)
    return model, optimizer
