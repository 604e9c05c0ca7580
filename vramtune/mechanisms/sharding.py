"""ZeRO-style sharding over the data-parallel ranks: stage 1 partitions the optimizer state, stage 2 also the
gradients, stage 3 also the parameters. Stage 1 is fleet's DygraphShardingOptimizer (runs on CPU with gloo);
stages 2 and 3 are group_sharded_parallel, which Paddle runs on GPUs (and XPUs) only.

In the search: at the whole batch, stage 1 measured and higher stages where predicted to fit; then each stage an
outer alternative, searched in depth where it lets a larger micro-batch fit than without."""
from __future__ import annotations

from vramtune.core.strategy import FIELDS, SHARDING_STAGES
from vramtune.mechanisms.base import Mechanism, SearchView

PARTITIONED = {1: ("optimizer",), 2: ("optimizer", "gradient"), 3: ("optimizer", "gradient", "weight")}
STATE_PART = {"optimizer": "optimizer_state", "gradient": "gradients", "weight": "weights"}  # in the estimate's state
GPU_ONLY_REASON = ("sharding stage {stage} (group_sharded_parallel) runs on GPU only: Paddle asserts 'only support "
                   "gpu, xpu and custom_device'")
NEIGHBOUR_MARGIN = 0.03  # a stage predicted over the limit by more than this is not probed


class Sharding(Mechanism):
    name = "sharding"
    fields = (FIELDS["sharding_stage"],)

    def read(self, spec) -> bool:
        return spec.search.get("sharding", str, "auto", choices=("auto", "off")) != "off"

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

    # -- the estimate ------------------------------------------------------------------------------------
    def counted_state(self, state, strategy, counts, given) -> dict[str, int]:
        """Each rank keeps 1/N of what its stage partitions."""
        ranks = strategy.devices
        if ranks < 2:
            return state
        return {**state, **{STATE_PART[part]: state[STATE_PART[part]] // ranks
                            for part in PARTITIONED.get(strategy.sharding_stage, ())}}


    # -- search ------------------------------------------------------------------------------------------
    def considered(self, search: SearchView) -> dict[int, str | None]:
        """stage -> why the device cannot run it (None: it can); only stage 0 with one rank or sharding off."""
        if search.base.devices < 2 or not search.settings(self.name):
            return {0: None}
        return {stage: search.unsupported(search.base.with_(sharding_stage=stage)) for stage in SHARDING_STAGES}

    def stages(self, search: SearchView) -> list[int]:
        return [stage for stage, why in self.considered(search).items() if not why]

    def notes(self, search: SearchView) -> list[str]:
        return [f"sharding stage {stage} skipped: {why}" for stage, why in self.considered(search).items() if why]

    def whole_batch(self, base, search: SearchView) -> None:
        """The whole batch with the state partitioned, lowest stage first. The first stage is measured (it also
        shows what data parallel's own buffers cost); higher stages only where predicted to fit from the
        counted weight, gradient and optimizer bytes."""
        for index, stage in enumerate(self.stages(search)[1:]):
            sharded = base.with_(sharding_stage=stage)
            predicted = search.predict(sharded)
            hopeful = predicted is None or predicted <= search.limit * (1 + NEIGHBOUR_MARGIN)
            if (index == 0 or hopeful) and search.probe("sharding", sharded).fits:
                return

    def alternatives(self, base, search: SearchView):
        return [{"sharding_stage": stage} for stage in self.stages(search)]

    def worth_searching(self, candidate, search: SearchView) -> bool:
        """Stage 0 always; a higher stage where partitioning the state lets a larger micro-batch fit than the
        largest fitting without recompute (predicted)."""
        if not candidate.sharding_stage:
            return True
        fitting = search.fitting_micro_batches(candidate, varying=("sharding_stage",))
        larger = [m for m in search.problem.micro_batches if m > max(fitting, default=0)]
        if not larger:
            return False
        predicted = search.predict(search.sized(candidate, min(larger)))
        return predicted is None or predicted <= search.limit

    # -- child side --------------------------------------------------------------------------------------
    def prepare_training(self, model, optimizer, strategy, settings):
        from vramtune.mechanisms.data_parallel import distributed

        return distributed.sharded(model, optimizer, strategy)

    def scaler(self, scaler, strategy, settings):
        from vramtune.mechanisms.data_parallel import distributed

        return distributed.sharded_scaler(scaler, strategy)


MECHANISM = Sharding()
