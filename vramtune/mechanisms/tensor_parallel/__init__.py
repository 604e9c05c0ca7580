"""Tensor parallelism (Megatron's split of each layer over `tensor_parallel` ranks), with sequence parallelism
(the activations outside attention and the MLP split along the sequence): a probe runs it for real, every rank under
`python -m paddle.distributed.launch` (probing/ranks.py launches `Strategy.ranks` processes: each data-parallel
rank's tensor-parallel ranks), each rank's peak read from its own counters.

The model splits itself: PaddleFormers' models build ColumnParallelLinear, RowParallelLinear,
VocabParallelEmbedding and ParallelCrossEntropy when their configuration's `tensor_model_parallel_size` is above 1,
over fleet's hybrid group (PaddleFormers' own argument parsing initialises fleet as its Trainer does; a model with
no such configuration is `unsupported`). Trained as the Trainer trains it: `fleet.distributed_model` (TensorParallel)
and `fleet.distributed_optimizer`.

On a CPU (gloo) Paddle 3.3.1 lacks some of what that runs: cpu_stand_ins.py supplies it, in the probe child only,
each stand-in allocating what Paddle's GPU kernel allocates (tests/paddle/test_parallel_ranks.py); the output says
so (`probe_notes`). This step keeps the file's degree: the search probes every strategy at it and does not vary
it (search/record.py's base); `apply` writes it back as it was (the dialect's codec), and the file's own workflow
verifies it only under the user's launch (--verify-with: vramtune runs the workflow as one process)."""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Mechanism, Unsupported

# what a CPU probe stands in for (cpu_stand_ins.py), said in its output
STOOD_IN = ("c_identity", "c_softmax_with_cross_entropy", "reduce_scatter (from send/recv)",
            "the *_on_calc_stream collectives (their synchronous forms)")
CPU_NOTE = ("on a CPU: " + ", ".join(STOOD_IN) + " stood in for (Paddle's CPU build lacks them; each allocates what "
            "the GPU kernel allocates, in the probe child only, never in a file vramtune writes), and every rank "
            "trains the same batch (mp_configs.need_broadcast_data off); see docs/paddleformers.md")
MIN_PADDLE = (3, 0)  # fleet's tensor-parallel layers and the mp_ops the stand-ins replace, as 3.x has them
NO_SPLIT = ("tensor parallelism needs a model that splits its own layers (a PaddleFormers model's configuration "
            "with tensor_model_parallel_size): this model's configuration has none")


@dataclass(frozen=True)
class TensorParallelSettings:
    """The degree and sequence parallelism a spec fixes for the run (the search keeps them)."""

    degree: int = 1
    sequence: bool = False


def _version(text: str | None) -> tuple[int, ...]:
    parts = []
    for part in (text or "").split(".")[:2]:
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


class TensorParallel(Mechanism):
    name = "tensor_parallel"
    fields = (FIELDS["tensor_parallel"], FIELDS["sequence_parallel"])

    def read(self, spec) -> TensorParallelSettings:
        degree = spec.root.get("tensor_parallel", int, 1, check=FIELDS["tensor_parallel"].check) or 1
        sequence = bool(spec.root.get("sequence_parallel", bool, False))
        if sequence and degree < 2:
            spec.root.fail("sequence_parallel", "needs tensor parallelism (tensor_parallel above 1): it splits what "
                                                "the tensor-parallel ranks would each hold whole")
        return TensorParallelSettings(degree, sequence)

    def unsupported(self, strategy, device) -> str | None:
        degree = strategy.tensor_parallel
        if strategy.sequence_parallel and degree < 2:
            return "sequence parallelism needs tensor parallelism (a degree above 1)"
        if degree < 2:
            return None
        if device.kind not in ("cpu", "gpu"):
            return f"tensor parallelism is probed on a GPU (NCCL) or a CPU (gloo) only, not on {device.kind}"
        found = _version(device.paddle_version)
        if found and found[0] > 0 and found < MIN_PADDLE:  # a develop build says 0.0.0
            return (f"tensor parallelism needs Paddle {'.'.join(map(str, MIN_PADDLE))} or later (fleet's "
                    "tensor-parallel layers and ops as PaddleFormers uses them); this is Paddle "
                    f"{device.paddle_version}")
        if strategy.devices > 1 or strategy.sharding_stage:
            return ("tensor parallelism beside data-parallel ranks or sharding is not probed yet: one data-parallel "
                    "replica of tensor_parallel ranks is")
        if strategy.to_static:
            return "tensor parallelism is probed in eager mode only (to_static is not tried with it)"
        if device.kind == "gpu" and device.index + strategy.ranks > device.count:
            return f"{strategy.ranks} ranks need {strategy.ranks} GPUs from gpu:{device.index}; this machine has " \
                   f"{device.count}"
        return None

    def probe_notes(self, strategy, device_kind: str) -> list[str]:
        return [CPU_NOTE] if strategy.tensor_parallel > 1 and device_kind == "cpu" else []

    # -- the child ---------------------------------------------------------------------------------------------
    def configure_model(self, config, strategy, settings) -> None:
        """Before the model is built: fleet's hybrid group of the tensor-parallel ranks (unless the model's own
        argument parsing made it, as PaddleFormers' does), the CPU stand-ins, and the split on its configuration."""
        if strategy.tensor_parallel < 2:
            return
        if not hasattr(config, "tensor_model_parallel_size"):
            raise Unsupported(NO_SPLIT)
        from vramtune.mechanisms.tensor_parallel import runtime

        runtime.configure(config, strategy)

    def prepare_training(self, model, optimizer, strategy, settings):
        if strategy.tensor_parallel < 2:
            return model, optimizer
        from vramtune.mechanisms.tensor_parallel import runtime

        return runtime.distributed(model, optimizer)


MECHANISM = TensorParallel()
