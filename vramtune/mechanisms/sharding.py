"""ZeRO-style sharding over the data-parallel ranks: stage 1 partitions the optimizer state, stage 2 also the
gradients, stage 3 also the parameters. Stage 1 is fleet's DygraphShardingOptimizer (runs on CPU with gloo);
stages 2 and 3 are group_sharded_parallel, which Paddle runs on GPUs (and XPUs) only."""
from __future__ import annotations

from vramtune.mechanisms.base import Field, Mechanism

STAGES = (0, 1, 2, 3)
PARTITIONED = {1: ("optimizer",), 2: ("optimizer", "gradient"), 3: ("optimizer", "gradient", "weight")}
GPU_ONLY_REASON = ("sharding stage {stage} (group_sharded_parallel) runs on GPU only: Paddle asserts 'only support "
                   "gpu, xpu and custom_device'")


def _stage(value: int) -> str | None:
    return None if value in STAGES else f"must be 0, 1, 2 or 3, got {value}"


class Sharding(Mechanism):
    name = "sharding"
    fields = (Field("sharding_stage", int, 0, "--sharding-stage", "-s",
                    "ZeRO-style sharding over the ranks: 1 optimizer state, 2 + gradients, 3 + parameters", _stage),)
    search_keys = ("sharding",)

    def read_search(self, section) -> bool:
        return section.get("sharding", str, "auto", choices=("auto", "off")) != "off"

    def label(self, strategy, total_blocks: int | None = None) -> str:
        return f"s={strategy.sharding_stage}" if strategy.sharding_stage else ""

    def weight(self, strategy) -> int:
        return strategy.sharding_stage

    def unsupported(self, strategy, device) -> str | None:
        stage = strategy.sharding_stage
        if stage and strategy.devices < 2:
            return "sharding needs at least 2 ranks (devices)"
        if stage >= 2 and device.kind != "gpu":
            return GPU_ONLY_REASON.format(stage=stage)
        return None

    def known_saving(self, strategy, counts) -> float:
        """Each rank keeps 1/N of what its stage partitions."""
        stage, ranks = strategy.sharding_stage, strategy.devices
        if not stage or ranks < 2:
            return 0.0
        return sum(counts.get(part, 0.0) for part in PARTITIONED[stage]) * (1 - 1 / ranks)

    def prepare_training(self, model, optimizer, strategy):
        from vramtune.child import distributed

        return distributed.sharded(model, optimizer, strategy)

    def wrap_scaler(self, scaler, strategy):
        from vramtune.child import distributed

        return distributed.sharded_scaler(scaler, strategy)

    def paddlenlp(self, tuned):
        stage = tuned.get("sharding_stage", 0)
        if not stage:
            return {}, []
        return {"sharding": f"stage{stage}", "sharding_parallel_degree": tuned["devices"]}, []


MECHANISM = Sharding()
