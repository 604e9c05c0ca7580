"""What Paddle 3.3.1's CPU build lacks to run fleet's tensor parallelism (with sequence parallelism) over gloo:
stand-ins for the tensor-parallel mechanism's probe child only (mechanisms/tensor_parallel/__init__.py imports this
inside its runtime hooks, in the child, on a CPU; bench/parallel/ imports it from here). Never in a file vramtune
writes.

Each stand-in allocates, through Paddle's allocator, what the GPU path allocates (from PaddlePaddle/Paddle's source,
as its docstring cites), so that a rank's host allocator peak stands for its device's allocated peak; where it cannot
(a collective gloo lacks, rebuilt from point-to-point calls) the transient it adds is said.

Settings rather than stand-ins, which a launch passes in its DistributedStrategy: `mp_configs.need_broadcast_data =
False` (fleet's TensorParallel broadcasts each batch from the first mp rank through a CPU-less path: every rank
builds the same batch instead; `no_broadcast_data` where the strategy is not ours to build) and
`pp_configs.use_batch_p2p_comm = False` (gloo has no coalesced p2p).
"""
from __future__ import annotations

import paddle
from paddle.autograd import PyLayer
from paddle.base import core

SUM = core.ReduceOp.SUM


def install() -> None:
    """Every fix, once."""
    if getattr(core, "_vramtune_cpu_stand_ins", False):
        return
    _calc_stream()
    _c_identity()
    _c_softmax_with_cross_entropy()
    _device_id()
    core._vramtune_cpu_stand_ins = True


def _calc_stream() -> None:
    """gloo's ProcessGroup raises on every `*_on_calc_stream` call (process_group.h: "does not support ... with
    sync_op and use_calc_stream flag"): each is pointed at its synchronous counterpart. On a GPU the calc-stream
    variants differ from the synchronous ones only in the stream they are queued on, never in what they allocate
    (the collective writes into the tensors it is given: ProcessGroupNCCL::Collective), so nothing changes here
    either."""
    group = core.ProcessGroupGloo
    group.all_reduce_on_calc_stream = lambda self, tensor, op=SUM: self.all_reduce(tensor, op, True)
    group.all_gather_into_tensor_on_calc_stream = lambda self, out, x: self.all_gather_into_tensor(out, x, True)
    group.all_gather_on_calc_stream = lambda self, out, x: self.all_gather(out, x, True)
    group.broadcast_on_calc_stream = lambda self, tensor, src: self.broadcast(tensor, src, True)
    group.reduce_on_calc_stream = lambda self, tensor, dst, op: self.reduce(tensor, dst, op, True)
    group.send_on_calc_stream = lambda self, tensor, dst: self.send(tensor, dst, True)
    group.recv_on_calc_stream = lambda self, tensor, src: self.recv(tensor, src, True)
    group.send_partial_on_calc_stream = lambda self, tensor, dst, num, id: self.send_partial(tensor, dst, num, id, True)
    group.recv_partial_on_calc_stream = lambda self, tensor, src, num, id: self.recv_partial(tensor, src, num, id, True)
    group.reduce_scatter_tensor_on_calc_stream = lambda self, out, x, op: _reduce_scatter_into(self, out, x)
    # paddle.distributed.stream.reduce_scatter (sequence parallel's ReduceScatterOp) calls this one
    group.reduce_scatter_tensor = lambda self, out, x, op, sync_op=True: _reduce_scatter_into(self, out, x)


class _Done:
    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _reduce_scatter_into(group, out: paddle.Tensor, x: paddle.Tensor) -> _Done:
    """`out` = the sum over the ranks of their `x`'s own chunk (dimension 0), which gloo's ProcessGroup lacks
    (ProcessGroupGloo has no ReduceScatter), from send/recv: this rank's chunk copied into `out`, then each peer's
    chunk of ours received and added. NCCL's reduce_scatter writes into `out` and allocates nothing in Paddle's
    allocator; this adds one transient receive buffer of `out`'s size (and a contiguous copy of each sent chunk),
    freed before it returns."""
    ranks, rank = group.size(), group.rank()
    chunk = x.shape[0] // ranks
    out.copy_(x[rank * chunk:(rank + 1) * chunk], False)
    for peer in range(ranks):
        if peer == rank:
            continue
        send = x[peer * chunk:(peer + 1) * chunk].contiguous()
        received = paddle.empty_like(out)
        if rank < peer:
            group.send(send, peer, True)
            group.recv(received, peer, True)
        else:
            group.recv(received, peer, True)
            group.send(send, peer, True)
        out.add_(received)
    return _Done()


def _c_identity() -> None:
    """c_identity has no CPU kernel in Paddle 3.3.1. The GPU kernel (paddle/phi/kernels/impl/c_identity_kernel_impl.h,
    CIdentityKernel) allocates `out` of x's shape and copies x into it: a clone allocates the same."""
    original = paddle._C_ops.c_identity

    def c_identity(x, ring_id, use_calc_stream, use_model_parallel):
        if x.place.is_cpu_place():
            return x.clone()
        return original(x, ring_id, use_calc_stream, use_model_parallel)

    paddle._C_ops.c_identity = c_identity


class _ParallelSoftmaxCrossEntropy(PyLayer):
    """The vocabulary-parallel softmax cross entropy, allocating what the GPU kernels allocate
    (paddle/phi/kernels/gpu/c_softmax_with_cross_entropy_kernel.cu: `softmax` [N, V/mp] kept for the backward,
    `loss` [N, 1] and three [N, 1] buffers, logits_max, predicted_logits and sum_exp_logits, all-reduced over the mp
    group; c_softmax_with_cross_entropy_grad_kernel.cu: logits_grad [N, V/mp], softmax copied into it and the label's
    one subtracted, times the loss's gradient). Beside the kernel's, it keeps each label's local index and mask, 9
    bytes per token (bench/parallel/stand_ins.py measures them; tests/paddle/test_parallel_ranks.py)."""

    @staticmethod
    def forward(ctx, logits, label, ignore_index, rank, group):
        classes = logits.shape[-1]
        flat = logits.reshape([-1, classes])
        labels = label.reshape([-1, 1]).astype("int64")
        start = rank * classes
        logits_max = flat.max(axis=-1, keepdim=True)
        group.process_group.all_reduce(logits_max, core.ReduceOp.MAX, True)
        softmax = flat - logits_max  # the kernel's softmax buffer, [N, V/mp]
        local = labels - start
        mine = (local >= 0) & (local < classes)
        index = paddle.where(mine, local, paddle.zeros_like(local))
        predicted = paddle.take_along_axis(softmax, index, axis=-1) * mine.astype(softmax.dtype)
        group.process_group.all_reduce(predicted, SUM, True)
        softmax.exp_()
        sum_exp = softmax.sum(axis=-1, keepdim=True)
        group.process_group.all_reduce(sum_exp, SUM, True)
        loss = (sum_exp.log() - predicted) * (labels != ignore_index).astype(softmax.dtype)
        softmax.divide_(sum_exp)
        ctx.save_for_backward(softmax, index, mine, labels)
        ctx.ignore_index, ctx.shape = ignore_index, logits.shape
        return loss.reshape([*label.shape[:-1], 1])

    @staticmethod
    def backward(ctx, loss_grad):
        softmax, index, mine, labels = ctx.saved_tensor()
        grad = softmax.clone()  # the grad kernel's logits_grad, [N, V/mp]
        grad.put_along_axis_(index, -mine.astype(grad.dtype), axis=-1, reduce="add")
        scale = loss_grad.reshape([-1, 1]) * (labels != ctx.ignore_index).astype(grad.dtype)
        grad.multiply_(scale)
        return grad.reshape(ctx.shape), None


def _c_softmax_with_cross_entropy() -> None:
    """c_softmax_with_cross_entropy (ParallelCrossEntropy's op) has no CPU kernel in Paddle 3.3.1: rebuilt with the
    GPU kernel's buffers (_ParallelSoftmaxCrossEntropy)."""
    from paddle.distributed.fleet.layers.mpu import mp_ops

    original = mp_ops._c_softmax_with_cross_entropy

    def c_softmax_with_cross_entropy(logits, label, group=None, return_softmax=False, ignore_index=-100):
        if not logits.place.is_cpu_place() or return_softmax or group is None:
            return original(logits, label, group, return_softmax, ignore_index)
        if len(label.shape) == len(logits.shape) - 1:
            label = label.unsqueeze(-1)
        rank = group.get_group_rank(paddle.distributed.get_rank())
        return _ParallelSoftmaxCrossEntropy.apply(logits, label, ignore_index, rank, group)

    mp_ops._c_softmax_with_cross_entropy = c_softmax_with_cross_entropy


def no_broadcast_data() -> None:
    """What `mp_configs.need_broadcast_data = False` does, for a launch whose strategy the harness does not build
    (PaddleFormers' Trainer): fleet's TensorParallel takes each rank's own batch instead of broadcasting the first mp
    rank's (`broadcast_input_data` asserts a GPU): every rank reads the same data."""
    from paddle.distributed.fleet.meta_parallel import tensor_parallel

    tensor_parallel.broadcast_input_data = lambda hcg, *inputs, **kwargs: (inputs, kwargs)


def _device_id() -> None:
    """ParallelEnv sets `_device_id` only for GPU, XPU and custom devices, and pipeline parallel reads it
    (`ParallelEnv().device_id`): 0 on a CPU build, where nothing is placed by it."""
    from paddle.distributed.parallel import ParallelEnv

    if not hasattr(ParallelEnv, "_device_id"):
        ParallelEnv._device_id = 0
