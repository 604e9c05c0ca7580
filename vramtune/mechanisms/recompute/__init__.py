"""Per-block recompute: the first r of the model's repeated blocks rebuild their activations in backward.

PaddleNLP models recompute through their own configuration (native.py here); other models, or a
PaddleNLP model given `model.block_path`, through vramtune's wrapper (blocks.py here). In the search it is an
axis: at one micro-batch, the fewest recomputed blocks that fit, then the model's cheaper granularities.
"""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.core.strategy import FIELDS
from vramtune.dialects.roundtrip import DELETE
from vramtune.mechanisms.base import Mechanism, Option

LEAST_COST = 0.1  # of the per-sample compute, every block recomputed: a third of the ~1/3 a forward costs
# the one combination of a PaddleFormers config's recompute keys its own models honour: every layer
FORMERS_EVERY_LAYER = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
# PaddleFormers' own model code (importable here) recomputes every layer or none; the other models (paddlefleet's)
# take Megatron's block method, the first N layers (assumed from TrainingArguments' documentation: paddlefleet cannot
# be read here)
FORMERS_ALL_OR_NONE = ("llama", "ernie4_5", "ernie4_5_moe")


@dataclass
class RecomputeSettings:
    enabled: bool = True  # search.recompute: auto
    block_path: str | None = None  # model.block_path: the container(s) of repeated blocks; None = detect


class Recompute(Mechanism):
    name = "recompute"
    fields = (FIELDS["recomputed_blocks"], FIELDS["recompute_granularity"])
    formers_keys = (*FORMERS_EVERY_LAYER, "recompute_modules")
    most_cost = 0.5  # every block recomputed runs each forward once more: a forward is about a third of a step
    options = (Option("no_recompute", "--no-recompute", bool, False, "never recompute blocks",
                      lambda value: {"search.recompute": "off" if value else None}),)

    def read(self, spec) -> RecomputeSettings:
        return RecomputeSettings(spec.search.get("recompute", str, "auto", choices=("auto", "off")) != "off",
                                 spec.model.get("block_path", str, None))

    def to_formers(self, config, tuned) -> dict:
        """Every layer when the choice recomputes (the only combination PaddleFormers' own models honour, so the
        search explores nothing else there), or the first N layers by the block method where the model's code
        recomputes those (the estimate's paddlefleet models: `formers_facts`); the file's combination removed when
        it recomputes nothing (and where the model recomputes the first N, a block method's)."""
        recomputed, facts = tuned.strategy.recomputed_blocks, tuned.facts
        partial = (facts.get("recompute_options") or {}).get("partial")
        if recomputed and partial and recomputed < facts.get("total_blocks", 0):
            return {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": recomputed}
        if recomputed:
            return dict(FORMERS_EVERY_LAYER)
        first_n = partial and config.get("recompute_method") == "block" and config.get("recompute_num_layers")
        if first_n or all(config.get(key) == value for key, value in FORMERS_EVERY_LAYER.items()):
            return dict.fromkeys(FORMERS_EVERY_LAYER, DELETE)
        return {}

    def from_kit(self, config) -> dict:
        """The kits have no recompute key."""
        return {"recompute": "off"}

    def child_settings(self, settings: RecomputeSettings, budget) -> dict:
        return {"block_path": settings.block_path}

    def phrase(self, strategy, facts) -> tuple[str, str] | None:
        """Nothing when no block is recomputed (as sharding and data parallel say nothing when off)."""
        granularity = strategy.recompute_granularity
        if not strategy.recomputed_blocks:
            return None
        return "memory", (f"recompute {strategy.recomputed_blocks}/{facts.get('total_blocks') or 0} blocks"
                          + (f" ({granularity})" if granularity != "full" else ""))

    preferred = (1, "the fewest layers recomputed")

    def rerun_layers(self, strategy) -> int:
        return strategy.recomputed_blocks

    def preference(self, strategy) -> list[tuple[int, int]]:
        return [(1, strategy.recomputed_blocks)]

    def counted_facts(self, counts) -> dict:
        return {"total_blocks": counts.layers}

    def column(self, strategy, facts) -> tuple[str, str]:
        blocks = strategy.recomputed_blocks
        return "recompute", f"{blocks}/{facts.get('total_blocks') or 0}" if blocks else "-"

    def formers_facts(self, model_type) -> dict:
        """PaddleFormers' own models recompute every layer or none; the paddlefleet ones the first N layers too."""
        return {"recompute_options": {"granularities": ["full"], "partial": model_type not in FORMERS_ALL_OR_NONE}}

    def file_counts(self, layers, model_type) -> tuple[dict, dict[str, tuple[int, ...]]]:
        """The probe's blocks are the model's layers (num_hidden_layers): every one of them where the model's code
        recomputes every layer or none (`to_formers` writes the same keys for any count there), else 1..L (the
        first N by the block method, L every layer)."""
        if not layers:
            return {}, {}
        facts = {"total_blocks": layers, **self.formers_facts(model_type)}
        counts = range(1, layers + 1) if facts["recompute_options"]["partial"] else range(layers, layers + 1)
        return facts, {"recomputed_blocks": tuple(counts)}

    def estimate_choices(self, question, arch, fine_tuning) -> tuple[int, list[dict[str, int]]]:
        """What the model's code can recompute: every layer or none in PaddleFormers' own code, where a layer
        recomputes only when its input needs a gradient (under LoRA never the first: the embeddings are frozen);
        a quarter, half, three quarters too in the paddlefleet models. Inside the precisions and stages."""
        from vramtune.memory.state import recompute_levels

        if self.formers_facts(arch.model_type)["recompute_options"]["partial"]:
            levels = recompute_levels(arch.layers)
        else:
            levels = [0, arch.layers - 1 if fine_tuning == "LoRA" else arch.layers]
        return 2, [{"recomputed_blocks": blocks} for blocks in levels]

    def spec_estimate_choices(self, settings, context) -> tuple[int, list[dict[str, int]]]:
        """None, a quarter, half, three quarters, every counted layer, where the spec allows recompute and the fit
        says recomputing every layer saves memory; none otherwise. Inside the precisions and stages."""
        from vramtune.memory.state import recompute_levels

        fit, layers = context.fit, context.counts.layers
        saves = fit.s0 + fit.s1 * layers / fit.width_scale > 0
        levels = recompute_levels(layers) if settings.enabled and saves else [0]
        return 2, [{"recomputed_blocks": blocks} for blocks in levels]

    def spec_estimate_notes(self, settings, context) -> dict[str, str]:
        return {"alone": "recompute not estimated: the model has no repeated blocks vramtune recomputes"} \
            if settings.enabled and not context.blocks_probed else {}

    def measured_lines(self, facts) -> list[str]:
        total = facts.get("total_blocks")
        return [] if total is None else [f"repeated blocks found: {total}"]

    def weight(self, strategy) -> int:
        return strategy.recomputed_blocks

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

    def suggest(self, search) -> list[str]:
        if not search.settings(self.name).enabled and search.facts.get("total_blocks"):
            return ["recompute: set search.recompute to auto"]
        return []

    # -- search: an axis ---------------------------------------------------------------------------------
    def levels(self, plain, search):
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

    def refine_level(self, found, search):
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

    # -- `vramtune doctor` ------------------------------------------------------------------------------
    def doctor_checks(self) -> tuple:
        """vramtune's wrapper and the model library's own recompute lower a small transformer's peak."""
        from vramtune.doctor.recompute import CHECK

        return (CHECK,)

    # -- child side --------------------------------------------------------------------------------------
    def configure_model(self, config, strategy, settings):
        from vramtune.mechanisms.recompute import native

        if not (settings or {}).get("block_path"):  # a block path given: the wrapper recomputes those blocks instead
            native.configure(config, strategy)

    def prepare_model(self, model, strategy, settings):
        from vramtune.mechanisms.recompute import native
        from vramtune.mechanisms.recompute.blocks import apply_recompute
        from vramtune.sources.base import BuildError

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
