"""Per-block recompute: the first r of the model's repeated blocks rebuild their activations in backward."""
from __future__ import annotations

from vramtune.mechanisms.base import Field, Mechanism, Option

GRANULARITIES = ("full", "full_attn", "core_attn")  # full: the whole block; the others only PaddleNLP models know


def _not_negative(value: int) -> str | None:
    return None if value >= 0 else f"must be 0 or more, got {value}"


def _granularity(value: str) -> str | None:
    return None if value in GRANULARITIES else f"must be one of {', '.join(GRANULARITIES)}, got {value!r}"


class Recompute(Mechanism):
    name = "recompute"
    fields = (Field("recomputed_blocks", int, 0, "--recompute", "-r", "number of repeated blocks to recompute",
                    _not_negative),
              Field("recompute_granularity", str, "full", "--granularity", "-g", "what a recomputed block recomputes: "
                    "full, or (PaddleNLP models that support it) full_attn / core_attn", _granularity))
    options = (Option("no_recompute", "--no-recompute", bool, False, "never recompute blocks",
                      lambda value: {"search.recompute": "off" if value else None}),)
    search_keys = ("recompute",)

    def read_search(self, section) -> bool:
        return section.get("recompute", str, "auto", choices=("auto", "off")) != "off"

    def label(self, strategy, total_blocks: int | None = None) -> str:
        granularity = strategy.recompute_granularity
        return (f"r={strategy.recomputed_blocks}" + (f"/{total_blocks}" if total_blocks else "")
                + (f":{granularity}" if granularity != "full" else ""))

    def weight(self, strategy) -> int:
        return strategy.recomputed_blocks

    def memory_term(self, strategy) -> float:
        if strategy.recompute_granularity != "full":
            return 0.0  # measured in a memory group of its own
        return -float(strategy.micro_batch * strategy.recomputed_blocks)  # each block saves about e bytes/sample

    def memory_group(self, strategy) -> str:
        partial = strategy.recomputed_blocks and strategy.recompute_granularity != "full"
        return strategy.recompute_granularity if partial else ""

    def configure_model(self, config, strategy, block_path):
        from vramtune.child import native_recompute

        if not block_path:  # a block path given: the wrapper recomputes those blocks instead
            native_recompute.configure(config, strategy)

    def prepare_model(self, model, strategy, block_path):
        from vramtune.child import native_recompute
        from vramtune.child.blocks import BlockError, apply_recompute

        if native_recompute.is_native(model) and not block_path:
            return native_recompute.enable(model, strategy)
        if strategy.recompute_granularity != "full":
            raise BlockError(f"recompute_granularity {strategy.recompute_granularity!r} needs a PaddleNLP model "
                             "with its own recompute")
        total, path = apply_recompute(model, strategy.recomputed_blocks, block_path)
        return {"total_blocks": total, "block_path": path}

    def paddlenlp(self, tuned):
        recomputed, total = tuned["recomputed_blocks"], tuned.get("total_blocks") or 0
        native = tuned.get("recompute_options")
        if native and recomputed:  # the model's own mechanism: exactly what was measured
            arguments = {"recompute": True, "recompute_granularity": tuned["recompute_granularity"]}
            if native["partial"]:
                arguments["no_recompute_layers"] = list(range(recomputed, total)) or None
            return arguments, []
        warnings = []
        if 0 < recomputed < total:
            warnings.append(
                f"recompute of {recomputed} of {total} blocks does not map: TrainingArguments.recompute recomputes "
                "every layer (it still fits, but is slower than measured); for exactly the measured configuration "
                "train with vramtune.runtime")
        return {"recompute": recomputed > 0}, warnings


MECHANISM = Recompute()
