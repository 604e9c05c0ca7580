"""One rank of a check that the CPU stand-ins (vramtune/mechanisms/tensor_parallel/cpu_stand_ins.py, through
bench/parallel/cpu_compat.py) allocate what Paddle's GPU kernels allocate:
run under `python -m paddle.distributed.launch --nproc_per_node 2` (tests/paddle/test_parallel_ranks.py); prints one
`VRAMTUNE_STAND_INS {...}` line of host allocator bytes.

- c_identity (c_identity_kernel_impl.h): `out` of x's shape, allocated and copied: x's bytes;
- c_softmax_with_cross_entropy (c_softmax_with_cross_entropy_kernel.cu): kept for the backward, `softmax`
  [N, V/mp] and `loss` [N, 1] (its [N, 1] buffers are freed on return); its grad kernel: `logits_grad` [N, V/mp].
"""
from __future__ import annotations

import json
import os
import sys

import paddle
from paddle.base import core

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_compat

cpu_compat.install()


def allocated() -> int:
    return core.host_memory_stat_current_value("Allocated", 0)


def main() -> None:
    from paddle.distributed import fleet
    from paddle.distributed.fleet.layers.mpu import mp_ops

    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    group = fleet.get_hybrid_communicate_group().get_model_parallel_group()
    tokens, vocab = 64, 300
    x = paddle.rand([tokens, 256])
    before = allocated()
    copy = paddle._C_ops.c_identity(x, group.id, True, True)
    identity = allocated() - before
    del copy
    logits = paddle.rand([tokens, vocab // 2])
    logits.stop_gradient = False
    labels = paddle.randint(0, vocab, [tokens, 1])
    before = allocated()
    loss = mp_ops._c_softmax_with_cross_entropy(logits, labels, group=group)
    kept = allocated() - before
    core.host_memory_stat_reset_peak_value("Allocated", 0)
    start = allocated()
    loss.sum().backward()
    backward = core.host_memory_stat_peak_value("Allocated", 0) - start
    print("VRAMTUNE_STAND_INS " + json.dumps({
        "identity": identity, "x": tokens * 256 * 4, "kept": kept, "softmax": tokens * vocab // 2 * 4,
        "loss": tokens * 4, "backward": backward, "rank": paddle.distributed.get_rank()}), flush=True)


if __name__ == "__main__":
    main()
