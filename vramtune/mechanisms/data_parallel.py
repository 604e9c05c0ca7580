"""Data parallel: `devices` ranks on this node share the batch (target = micro-batch x accumulation x ranks).
Probes with several ranks run under `python -m paddle.distributed.launch` (gloo on CPU, NCCL on GPU)."""
from __future__ import annotations

import sys
from pathlib import Path

from vramtune.mechanisms.base import Field, Mechanism, Option
from vramtune.reading import positive

WORKER = Path(__file__).resolve().parent.parent / "child" / "worker.py"


class DataParallel(Mechanism):
    name = "data_parallel"
    fields = (Field("devices", int, 1, "--devices", "-n", "data-parallel ranks on this node", positive(1024)),)
    options = (Option("devices", "--devices", int, None, "data-parallel ranks on this node (overrides the spec)",
                      lambda value: {"devices": value}),)
    soft_term = True

    def read_top(self, root) -> int:
        return root.get("devices", int, 1, check=positive(1024)) or 1

    def label(self, strategy, total_blocks: int | None = None) -> str:
        return f"n={strategy.devices}" if strategy.devices > 1 else ""

    def unsupported(self, strategy, device) -> str | None:
        if device.kind == "gpu" and strategy.devices > device.count:
            return f"{strategy.devices} ranks need {strategy.devices} GPUs; this machine has {device.count}"
        return None

    def memory_term(self, strategy) -> float:
        # paddle.DataParallel's fused gradient buffers; fleet's sharding optimizer goes without them
        return 1.0 if strategy.devices > 1 and not getattr(strategy, "sharding_stage", 0) else 0.0

    def prepare_training(self, model, optimizer, strategy):
        from vramtune.child import distributed

        return distributed.data_parallel(model, optimizer, strategy)

    def launcher(self, strategy) -> list[str] | None:
        if strategy.devices == 1:
            return None
        return [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(strategy.devices),
                "--log_dir", "log", "--job_id", "vramtune", "--log_overwrite", "true", "--max_restart", "0",
                "--host", "127.0.0.1", str(WORKER)]

    def paddlenlp(self, tuned):
        devices = tuned.get("devices", 1)
        if devices == 1:
            return {}, []
        return {}, [f"launch with: python -m paddle.distributed.launch --nproc_per_node {devices} "
                    "YOUR_SCRIPT.py THIS_FILE.json (the data-parallel degree is the ranks left after sharding)"]


MECHANISM = DataParallel()
