"""Gradient accumulation: micro-batch m, k micro-batches per optimizer step (m x k = the target batch)."""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.mechanisms.base import Field, Mechanism, Option
from vramtune.reading import positive


def _positive(value: int) -> str | None:
    return None if value > 0 else f"must be positive, got {value}"


BATCHNORM_FLOOR = 16  # BatchNorm statistics over fewer samples are noisy (Wu & He, Group Normalization, 2018)


@dataclass
class AccumulationSearch:
    max_accumulation: int = 64
    micro_batches: list[int] | None = None  # allowed micro-batch sizes; None = every divisor of the target
    min_micro_batch: int | None = None  # None: BATCHNORM_FLOOR for models with BatchNorm layers, else 1

    def candidates(self, target_batch: int) -> list[int]:
        """Micro-batches that reach the target exactly within max_accumulation, largest first."""
        allowed = self.micro_batches or range(1, target_batch + 1)
        return sorted((m for m in allowed if target_batch % m == 0
                       and target_batch // m <= self.max_accumulation), reverse=True)


class Accumulation(Mechanism):
    name = "accumulation"
    fields = (
        Field("micro_batch", int, 1, "--micro-batch", "-m", "samples per forward/backward", _positive),
        Field("accumulation", int, 1, "--accumulation", "-k",
              "micro-batches per optimizer step (default: target / micro)", _positive),
    )
    options = (Option("max_accumulation", "--max-accumulation", int, None, "largest accumulation tried",
                      lambda value: {"search.max_accumulation": value}),)
    search_keys = ("max_accumulation", "micro_batches", "min_micro_batch")
    nonnegative_term = False
    soft_term = True

    def read_search(self, section) -> AccumulationSearch:
        settings = AccumulationSearch(
            max_accumulation=section.get("max_accumulation", int, 64, check=positive(1 << 16)) or 64,
            micro_batches=section.get("micro_batches", list, None),
            min_micro_batch=section.get("min_micro_batch", int, None, check=positive(1 << 20)))
        if settings.micro_batches is not None and not all(
                isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in settings.micro_batches):
            section.fail("micro_batches", f"must be a list of positive integers, got {settings.micro_batches}")
            settings.micro_batches = None
        return settings

    def label(self, strategy, total_blocks: int | None = None) -> str:
        return f"m={strategy.micro_batch} k={strategy.accumulation}"

    def weight(self, strategy) -> int:
        return strategy.accumulation if strategy.accumulation > 1 else 0

    def memory_term(self, strategy) -> float:
        # k = 1 frees the gradients before the next forward; accumulating keeps them alive: measured off the line
        return 1.0 if strategy.accumulation == 1 else 0.0

    def prepare_model(self, model, strategy, block_path):
        """Counts the BatchNorm layers: their statistics come from one micro-batch, so small ones get a floor."""
        import paddle

        batchnorm = getattr(paddle.nn.layer.norm, "_BatchNormBase", paddle.nn.BatchNorm2D)
        return {"batchnorm_layers": sum(isinstance(layer, batchnorm) for layer in model.sublayers())}

    def paddlenlp(self, tuned):
        return {"per_device_train_batch_size": tuned["micro_batch"],
                "gradient_accumulation_steps": tuned["accumulation"]}, []


MECHANISM = Accumulation()
