"""ZeRO-style sharding over the data-parallel ranks: stage 1 partitions the optimizer state, stage 2 also the
gradients, stage 3 also the parameters. Stage 1 is fleet's DygraphShardingOptimizer (runs on CPU with gloo);
stages 2 and 3 are group_sharded_parallel, which Paddle runs on GPUs (and XPUs) only.

In the search: at the whole batch, stage 1 measured and higher stages where predicted to fit; then each stage an
outer alternative, searched in depth where it lets a larger micro-batch fit than without."""
from __future__ import annotations

from vramtune.core.reading import Section
from vramtune.core.strategy import FIELDS, SHARDING_STAGES
from vramtune.mechanisms.base import Mechanism

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

    def phrase(self, strategy, facts) -> tuple[str, str] | None:
        return ("memory", f"sharding stage {strategy.sharding_stage}") if strategy.sharding_stage else None

    def smoke(self, strategy) -> dict:
        return {"sharding_stage": 0}

    def on_ranks(self, strategy, devices) -> tuple[dict, list[str]]:
        stage = strategy.sharding_stage if devices > 1 else 0
        if stage:
            fewer = devices < strategy.devices
            return {"sharding_stage": stage}, [
                f"sharding stage {stage} splits the state over {devices} ranks, not {strategy.devices}: each rank "
                f"holds {'more' if fewer else 'less'} than it will in training, so "
                + ("a pass holds there and a fail may not" if fewer else "a fail holds there and a pass may not")]
        if strategy.sharding_stage:
            return {"sharding_stage": 0}, [
                f"sharding stage {strategy.sharding_stage} needs 2 ranks or more: measured without it, and without "
                "data parallel's gradient buffers, so a pass may not hold on the tuned ranks"]
        return {}, []

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
    preferred = (3, "the lowest sharding stage")

    def counted_state(self, state, strategy, counts, given) -> dict[str, int]:
        """Each rank keeps 1/N of what its stage partitions."""
        ranks = strategy.devices
        if ranks < 2:
            return state
        return {**state, **{STATE_PART[part]: state[STATE_PART[part]] // ranks
                            for part in PARTITIONED.get(strategy.sharding_stage, ())}}

    def preference(self, strategy) -> list[tuple[int, int]]:
        return [(3, strategy.sharding_stage)]

    def column(self, strategy, facts) -> tuple[str, str]:
        return "stage", str(strategy.sharding_stage)

    def estimate_choices(self, question, arch, fine_tuning) -> tuple[int, list[dict[str, int]]]:
        """Every stage with several devices, none with one; inside the precisions."""
        return 1, [{"sharding_stage": stage} for stage in (SHARDING_STAGES if question.devices > 1 else (0,))]

    def spec_estimate_choices(self, settings, context) -> tuple[int, list[dict[str, int]]]:
        """Every stage with several devices unless the spec turns sharding off, none otherwise; inside the
        precisions."""
        stages = SHARDING_STAGES if context.devices > 1 and settings else (0,)
        return 1, [{"sharding_stage": stage} for stage in stages]

    def from_formers(self, config) -> dict:
        """sharding (stage1 by default) and its degree, sharding_parallel_size, as PaddleNLP's keys say them;
        offloading its buffers to the host refused (not measured)."""
        from vramtune.dialects.paddlenlp.codec import read_sharding  # here: from_formers moves to its dialect

        data, offload = config.data, "sharding_offload_opt_buffersize_GB"
        config.seen.add(offload)
        if isinstance(data.get(offload), (int, float)) and data[offload] > 0:
            config.fail(offload, f"{data[offload]!r} changes memory: offloading sharding's buffers is not measured: "
                                 "remove it")
        arguments = {"sharding": data.get("sharding", "stage1"),
                     "sharding_parallel_degree": data.get("sharding_parallel_size", -1),
                     **({"sharding_parallel_config": data["sharding_parallel_config"]}
                        if "sharding_parallel_config" in data else {})}
        return read_sharding(Section(config.problems, config.file, config.prefix, arguments))

    def file_counts(self, layers, model_type) -> tuple[dict, dict[str, tuple[int, ...]]]:
        """Every stage: the file's ranks (its degree) are the spec's, so its writer tells them apart."""
        return {}, {"sharding_stage": SHARDING_STAGES[1:]}

    def from_kit(self, config) -> dict:
        """The kits have no sharding key."""
        return {"sharding": "off"}

    def to_formers(self, config, tuned) -> dict:
        """The stage chosen over the ranks; PaddleFormers' default (stage1 over every rank) turned off where the
        choice is no sharding on several ranks. One rank writes nothing: sharding then holds nothing."""
        stage, ranks = tuned.strategy.sharding_stage, tuned.strategy.devices
        if stage:
            return {"sharding": f"stage{stage}", "sharding_parallel_size": ranks}
        return {"sharding": ""} if ranks > 1 and config.get("sharding", "stage1") else {}

    def formers_on_cpu(self, arguments) -> dict:
        return {"sharding": ""} if arguments.get("sharding", "stage1") else {}

    # -- search ------------------------------------------------------------------------------------------
    def considered(self, search) -> dict[int, str | None]:
        """stage -> why the device cannot run it (None: it can); only stage 0 with one rank or sharding off."""
        if search.base.devices < 2 or not search.settings(self.name):
            return {0: None}
        return {stage: search.unsupported(search.base.with_(sharding_stage=stage)) for stage in SHARDING_STAGES}

    def stages(self, search) -> list[int]:
        return [stage for stage, why in self.considered(search).items() if not why]

    def notes(self, search) -> list[str]:
        return [f"sharding stage {stage} skipped: {why}" for stage, why in self.considered(search).items() if why]

    def whole_batch(self, base, search) -> None:
        """The whole batch with the state partitioned, lowest stage first. The first stage is measured (it also
        shows what data parallel's own buffers cost); higher stages only where predicted to fit from the
        counted weight, gradient and optimizer bytes."""
        for index, stage in enumerate(self.stages(search)[1:]):
            sharded = base.with_(sharding_stage=stage)
            predicted = search.predict(sharded)
            hopeful = predicted is None or predicted <= search.limit * (1 + NEIGHBOUR_MARGIN)
            if (index == 0 or hopeful) and search.probe("sharding", sharded).fits:
                return

    def alternatives(self, base, search):
        return [{"sharding_stage": stage} for stage in self.stages(search)]

    def worth_searching(self, candidate, search) -> bool:
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
