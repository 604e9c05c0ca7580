"""Per-block recompute: the first r of the model's repeated blocks rebuild their activations in backward.

PaddleNLP models recompute through their own configuration (child/native_recompute.py); other models, or a
PaddleNLP model given `model.block_path`, through vramtune's wrapper (child/blocks.py). In the search it is an
axis: at one micro-batch, the fewest recomputed blocks that fit, then the model's cheaper granularities.
"""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.mechanisms.base import Field, Mechanism, Option

GRANULARITIES = ("full", "full_attn", "core_attn")  # full: the whole block; the others only PaddleNLP models know


def _not_negative(value: int) -> str | None:
    return None if value >= 0 else f"must be 0 or more, got {value}"


def _granularity(value: str) -> str | None:
    return None if value in GRANULARITIES else f"must be one of {', '.join(GRANULARITIES)}, got {value!r}"


@dataclass
class RecomputeSettings:
    enabled: bool = True  # search.recompute: auto
    block_path: str | None = None  # model.block_path: the container(s) of repeated blocks; None = detect


class Recompute(Mechanism):
    name = "recompute"
    fields = (Field("recomputed_blocks", int, 0, "--recompute", "-r", "number of repeated blocks to recompute",
                    _not_negative),
              Field("recompute_granularity", str, "full", "--granularity", "-g", "what a recomputed block recomputes: "
                    "full, or (PaddleNLP models that support it) full_attn / core_attn", _granularity))
    most_cost = 0.5  # every block recomputed runs each forward once more: a forward is about a third of a step
    facts = ("total_blocks", "block_path", "recompute_options")  # recompute_options: {granularities, partial}
    options = (Option("no_recompute", "--no-recompute", bool, False, "never recompute blocks",
                      lambda value: {"search.recompute": "off" if value else None}),)

    def read(self, spec) -> RecomputeSettings:
        return RecomputeSettings(spec.search.get("recompute", str, "auto", choices=("auto", "off")) != "off",
                                 spec.model.get("block_path", str, None))

    def from_arguments(self, arguments) -> dict:
        """recompute, recompute_granularity and no_recompute_layers are what the search decides (and apply writes)."""
        arguments.get("recompute", bool, False)
        arguments.get("recompute_granularity", str, "full", choices=GRANULARITIES)
        arguments.get("no_recompute_layers", list, None)
        return {}

    def child_settings(self, settings: RecomputeSettings, budget) -> dict:
        return {"block_path": settings.block_path}

    def label(self, strategy, facts) -> str:
        granularity, total = strategy.recompute_granularity, facts.get("total_blocks")
        return (f"r={strategy.recomputed_blocks}" + (f"/{total}" if total else "")
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

    def suggest(self, search) -> list[str]:
        if not search.settings(self.name).enabled and search.facts(self.name).get("total_blocks"):
            return ["recompute: set search.recompute to auto"]
        return []

    def to_arguments(self, tuned):
        facts = tuned.facts_of(self.name)
        recomputed, total = tuned.strategy.recomputed_blocks, facts.get("total_blocks") or 0
        native = facts.get("recompute_options")
        if native and recomputed:  # the model's own mechanism: exactly what was measured
            arguments = {"recompute": True, "recompute_granularity": tuned.strategy.recompute_granularity}
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

    # -- search: an axis ---------------------------------------------------------------------------------
    def levels(self, plain, search):
        """r = L .. 0 blocks at one micro-batch; a model's own recompute without partial layers offers all or
        none, at its first granularity (GPT: core_attn only)."""
        facts = search.facts(self.name)
        blocks, native = facts.get("total_blocks") or 0, facts.get("recompute_options")
        if not search.settings(self.name).enabled:
            return []
        if not blocks:
            search.note("recompute skipped: no repeated blocks found (set model.block_path)")
            return []
        granularity, counts = "full", range(blocks, -1, -1)
        if native:
            granularity = "full" if "full" in native["granularities"] else native["granularities"][0]
            if not native["partial"]:
                counts = [blocks, 0]
        return [plain.with_(recomputed_blocks=r, recompute_granularity=granularity if r else "full") for r in counts]

    def refine_level(self, found, search):
        """A model's own recompute may offer cheaper granularities (full_attn, core_attn: they recompute less, save
        less): measured at every layer, at the micro-batch where recompute was needed."""
        best = search.results[found]
        facts = search.facts(self.name)
        native = facts.get("recompute_options")
        if not (native and found.recomputed_blocks):
            return best
        for granularity in native["granularities"]:
            alternative = found.with_(recomputed_blocks=facts["total_blocks"], recompute_granularity=granularity)
            if alternative != found:
                other = search.probe("granularity", alternative)
                if other.fits and other.samples_per_sec > best.samples_per_sec:
                    best = other
        return best

    # -- child side --------------------------------------------------------------------------------------
    def configure_model(self, config, strategy, settings):
        from vramtune.child import native_recompute

        if not (settings or {}).get("block_path"):  # a block path given: the wrapper recomputes those blocks instead
            native_recompute.configure(config, strategy)

    def prepare_model(self, model, strategy, settings):
        from vramtune.child import native_recompute
        from vramtune.child.blocks import apply_recompute
        from vramtune.sources.base import BuildError

        block_path = (settings or {}).get("block_path")
        if native_recompute.is_native(model) and not block_path:
            return model, native_recompute.enable(model, strategy)
        if strategy.recompute_granularity != "full":
            raise BuildError(f"recompute_granularity {strategy.recompute_granularity!r} needs a PaddleNLP model "
                             "with its own recompute")
        total, path = apply_recompute(model, strategy.recomputed_blocks, block_path)
        return model, {"total_blocks": total, "block_path": path}


MECHANISM = Recompute()
