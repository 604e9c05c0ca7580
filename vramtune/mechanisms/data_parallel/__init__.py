"""Data parallel: `devices` ranks on this node share the batch (target = micro-batch x accumulation x ranks).
Probes with several ranks run under `python -m paddle.distributed.launch` (gloo on CPU, NCCL on GPU: probing/ranks.py);
each rank writes its own result and `ranks.merge` makes one of them (the largest rank's peak must fit)."""
from __future__ import annotations

from vramtune.core.reading import positive
from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Mechanism, Option
from vramtune.memory.line import Term


class DataParallel(Mechanism):
    name = "data_parallel"
    fields = (FIELDS["devices"],)
    options = (Option("devices", "--devices", int, None, "data-parallel ranks on this node (overrides the spec)",
                      lambda value: {"devices": value}),)
    term = Term(soft=True)

    def read(self, spec) -> int:
        return spec.root.get("devices", int, 1, check=positive(1024)) or 1

    def unsupported(self, strategy, device) -> str | None:
        if device.kind != "gpu" or device.index + strategy.devices <= device.count:
            return None
        if device.index == 0:
            return f"{strategy.devices} ranks need {strategy.devices} GPUs; this machine has {device.count}"
        last = device.index + strategy.devices - 1  # past the GPU count Paddle exits (place.cc), no Python error
        return (f"{strategy.devices} ranks from gpu:{device.index} need GPUs {device.index} to {last}; this machine "
                f"has {device.count} (0 to {device.count - 1})")

    def memory_term(self, strategy) -> float:
        # paddle.DataParallel's fused gradient buffers; fleet's sharding optimizer goes without them
        return 1.0 if strategy.devices > 1 and not strategy.sharding_stage else 0.0

    def counted_state(self, state, strategy, counts, given) -> dict[str, int]:
        """paddle.DataParallel's fused gradient buffers, in the ratio to the gradients measured at 2 ranks; fleet's
        sharding optimizer goes without them."""
        several = strategy.devices > 1 and not strategy.sharding_stage
        return {**state, "buffers": int(given.buffer_ratio * state["gradients"]) if several else 0}


    def prepare_training(self, model, optimizer, strategy, settings):
        from vramtune.mechanisms.data_parallel import distributed

        return distributed.data_parallel(model, optimizer, strategy)


MECHANISM = DataParallel()
