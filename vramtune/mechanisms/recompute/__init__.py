"""Per-block recompute: the first r of the model's repeated blocks rebuild their activations in backward.

PaddleNLP models recompute through their own configuration (native.py here); other models, or a
PaddleNLP model given `model.block_path`, through vramtune's wrapper (blocks.py here). In the search it is an
axis: at one micro-batch, the fewest recomputed blocks that fit, then the model's cheaper granularities.
"""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Mechanism, Option, SearchView
from vramtune.memory.line import Term

LEAST_COST = 0.1  # of the per-sample compute, every block recomputed: a third of the ~1/3 a forward costs


@dataclass
class RecomputeSettings:
    enabled: bool = True  # search.recompute: auto
    block_path: str | None = None  # model.block_path: the container(s) of repeated blocks; None = detect


class Recompute(Mechanism):
    name = "recompute"
    fields = (FIELDS["recomputed_blocks"], FIELDS["recompute_granularity"])
    most_cost = 0.5  # every block recomputed runs each forward once more: a forward is about a third of a step
    options = (Option("no_recompute", "--no-recompute", bool, False, "never recompute blocks",
                      lambda value: {"search.recompute": "off" if value else None}),)

    def read(self, spec) -> RecomputeSettings:
        return RecomputeSettings(spec.search.get("recompute", str, "auto", choices=("auto", "off")) != "off",
                                 spec.model.get("block_path", str, None))


    def child_settings(self, settings: RecomputeSettings, budget) -> dict:
        return {"block_path": settings.block_path}


    def rerun_layers(self, strategy) -> int:
        return strategy.recomputed_blocks


    def weight(self, strategy) -> int:
        return strategy.recomputed_blocks

    term = Term()

    def memory_term(self, strategy) -> float:
        if strategy.recompute_granularity != "full":
            return 0.0  # measured in a memory group of its own
        return -float(strategy.micro_batch * strategy.recomputed_blocks)  # each block saves about e bytes/sample

    def least_cost(self, strategy, facts) -> float:
        """Each recomputed block runs its forward again: about a third of its compute (forward 1, backward 2);
        LEAST_COST of it at least, wherever the GPU was not idle anyway."""
        blocks = facts.get("total_blocks")
        return LEAST_COST * strategy.recomputed_blocks / blocks if blocks else 0.0

    def largest_coefficient(self, per_sample: float, facts) -> float | None:
        """A recomputed block saves at most its share of the activations: per sample, 1/L of them."""
        blocks = facts.get("total_blocks")
        return per_sample / blocks if blocks else None

    def memory_group(self, strategy) -> str:
        partial = strategy.recomputed_blocks and strategy.recompute_granularity != "full"
        return strategy.recompute_granularity if partial else ""

    def suggest(self, search: SearchView) -> list[str]:
        if not search.settings(self.name).enabled and search.facts.get("total_blocks"):
            return ["recompute: set search.recompute to auto"]
        return []

    # -- search: an axis ---------------------------------------------------------------------------------
    def levels(self, plain, search: SearchView):
        """r = L .. 0 blocks at one micro-batch; a model's own recompute without partial layers offers all or
        none, at its first granularity (GPT: core_attn only)."""
        facts = search.facts
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

    def refine_level(self, found, search: SearchView):
        """A model's own recompute may offer cheaper granularities (full_attn, core_attn: they recompute less, save
        less): measured at every layer, at the micro-batch where recompute was needed."""
        best = search.results[found]
        facts = search.facts
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
        from vramtune.mechanisms.recompute import native

        if not (settings or {}).get("block_path"):  # a block path given: the wrapper recomputes those blocks instead
            native.configure(config, strategy)

    def prepare_model(self, model, strategy, settings):
        from vramtune.core.errors import BuildError
        from vramtune.mechanisms.recompute import native
        from vramtune.mechanisms.recompute.blocks import apply_recompute

        block_path = (settings or {}).get("block_path")
        if native.is_native(model) and not block_path:
            return model, native.enable(model, strategy)
        if strategy.recompute_granularity != "full":
            raise BuildError(f"recompute_granularity {strategy.recompute_granularity!r} needs a PaddleNLP model "
                             "with its own recompute")
        total, path = apply_recompute(model, strategy.recomputed_blocks, block_path)
        return model, {"total_blocks": total, "block_path": path}

    def until_rebuild(self, model, strategy, settings):
        from vramtune.mechanisms.recompute.blocks import BlockError, stop_at_first_rebuild

        if not strategy.recomputed_blocks:
            return None
        try:
            return stop_at_first_rebuild(model, (settings or {}).get("block_path"))
        except BlockError:
            return None


MECHANISM = Recompute()
