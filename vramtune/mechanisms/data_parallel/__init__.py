"""Data parallel: `devices` ranks on this node share the batch (target = micro-batch x accumulation x ranks).
Probes with several ranks run under `python -m paddle.distributed.launch` (gloo on CPU, NCCL on GPU); each rank
writes its own result and `ranks.merge` makes one of them (the largest rank's peak must fit)."""
from __future__ import annotations

import sys
from pathlib import Path

from vramtune.core.reading import positive
from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Launch, Mechanism, Option

WORKER = Path(__file__).resolve().parents[2] / "child" / "worker.py"


class DataParallel(Mechanism):
    name = "data_parallel"
    fields = (FIELDS["devices"],)
    options = (Option("devices", "--devices", int, None, "data-parallel ranks on this node (overrides the spec)",
                      lambda value: {"devices": value}),)
    soft_term = True

    def read(self, spec) -> int:
        return spec.root.get("devices", int, 1, check=positive(1024)) or 1

    def fixed(self, settings: int) -> dict:
        return {"devices": settings}

    def unsupported(self, strategy, device) -> str | None:
        if device.kind == "gpu" and strategy.devices > device.count:
            return f"{strategy.devices} ranks need {strategy.devices} GPUs; this machine has {device.count}"
        return None

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

    def launcher(self, strategy, device, arguments, env) -> Launch | None:
        """Several ranks: the worker under paddle.distributed.launch, with a free block of ports for the
        rendezvous and nothing inherited that would reconfigure the launcher; each rank writes OUT.rankN."""
        if strategy.devices == 1:
            return None
        from vramtune.probing.ranks import launcher_env

        argv = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(strategy.devices),
                "--log_dir", "log", "--job_id", "vramtune", "--log_overwrite", "true", "--max_restart", "0",
                "--host", "127.0.0.1", str(WORKER), *arguments]
        return Launch(argv, launcher_env(env, strategy.devices, device.kind), strategy.devices)

MECHANISM = DataParallel()
