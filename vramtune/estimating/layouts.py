"""The hybrid-parallel layouts of a model known by its config.json: every layout of N devices that can run it
(memory/parallel.py, pruned as Paddle's auto_tuner and PaddleFormers prune them), each pipeline stage's per-rank
peak by part, the best few that fit, and the layout a PaddleFormers file states. Nothing multi-rank is probed here:
the split was measured once on 2 CPU ranks (bench/parallel_ranks.py).

Per rank of stage k: its layers' parameters (attention, dense MLP and shared experts over the tp ranks; norms and
routers whole; the routed experts over the tp ranks, or experts/ep whole ones under ep), the embedding on the first
stage, the head (and a tied embedding's copy, with pp > 1), the final norm and a multi-token-prediction block on the
last, counted from config.json (memory/architecture.py). Their bytes per precision and what sharding partitions are
the mechanisms' counted state (memory/state.py), over the dp ranks for the dense state and over the expert group
(N / (pp x ep)) for the experts'. Activations: the analytic per-layer model (memory/analytic.py) split as Megatron
splits them (memory/parallel.py), times the micro-batches in flight on the stage; the logits over the tp ranks on
the last stage (and the head's whole copy of its input with tp); what a stage sends and receives per micro-batch in
flight (pp); under ep the all-to-all's send and receive buffers of one layer's routed tokens. With tp = pp = ep = 1
a layout is the data-parallel row of answer.py to the byte (the same counted state and activations)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramtune.core.records import Budget
from vramtune.core.strategy import Strategy
from vramtune.memory.analytic import KEPT, LOGITS, MASK, RECOMPUTE_LAYER, RECOMPUTE_OUTSIDE, layer_bytes
from vramtune.memory.architecture import Architecture, count
from vramtune.memory.parallel import (
    PP_MASK,
    PP_RECEIVED_SBH,
    PP_SENT_SBH,
    WHOLE_NORMS,
    WHOLE_PER_COLUMN,
    Layout,
    Sizes,
    candidates,
    in_flight,
    problems,
    tensor_split,
    whole_sbh,
)
from vramtune.memory.state import Counts, Factors, Given, state
from vramtune.plugins import MECHANISMS

SHOWN = 5  # the best layouts listed
HALF_BYTES = 2  # the all-to-all buffers hold the routed tokens in the compute type
# in their order: the first decides, the next breaks its ties
PREFERENCES = ("no recompute", "the least model parallelism (tp x pp)", "the fewest pipeline stages",
               "the smallest ep", "the largest micro-batch", "the lowest sharding stage", "no interleaving")
# what the layouts' figures rest on, said with them
NOTES = (
    "layouts, counted: each pipeline stage's parameters from config.json, split as PaddleFormers 1.2 splits them "
    "(tp: attention, dense MLP, shared experts and the vocabulary; norms and routers whole; ep: experts/ep whole "
    "experts per rank; the embedding on the first stage, the head, final norm and multi-token-prediction block on the "
    "last, a tied embedding copied there with pp > 1); the dense state sharded over the dp ranks, the experts' over "
    "N / (pp x ep)",
    "layouts, measured on 2 CPU ranks (PaddleFormers' Llama, fp32, bench/parallel_ranks.py): what tp leaves whole "
    "on every rank (each column-parallel linear's copy of its input, the norms' tensors without sequence parallel), "
    "1F1B's micro-batches in flight and what pp's stages send and receive",
    "layouts, assumed: the same on a GPU and in half precision, fused projections as two column-parallel linears, "
    "the routed experts' activations over tp too; interleaved pipelines in Megatron's warm-up; under ep two "
    "all-to-all buffers of a layer's routed tokens in the compute type. Not counted: the layer sharding stage 3 "
    "gathers whole (nor in the data-parallel rows)",
)


@dataclass(frozen=True)
class Layer:
    """One decoder layer's parameters by how the layouts split them, and one sample's fp32 activations in it."""

    split: int  # over the tp ranks: attention, a dense MLP, shared experts
    whole: int  # on every tp rank: norms, the router
    experts: int  # the routed experts, all of them
    activations: float
    moe: bool


@dataclass
class StagePeak:
    """One rank of pipeline stage `index`: its counted state and activations by part, and the allocator's reserve."""

    index: int
    parts: dict[str, int]
    allocator: int

    @property
    def peak(self) -> int:
        return sum(self.parts.values())

    @property
    def reserved(self) -> int:
        return self.peak + self.allocator

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.index, **self.parts, "allocator": self.allocator, "peak_bytes": self.peak,
                "reserved_bytes": self.reserved}


@dataclass
class LayoutRow:
    layout: Layout
    stages: list[StagePeak]
    fits: bool = False

    @property
    def worst(self) -> StagePeak:
        return max(self.stages, key=lambda stage: stage.reserved)

    @property
    def reserved(self) -> int:
        return self.worst.reserved

    def to_json(self) -> dict[str, Any]:
        return {**self.layout.to_json(), "label": self.layout.label(), "fits": self.fits,
                "reserved_bytes": self.reserved, "stages": [stage.to_json() for stage in self.stages]}


@dataclass
class Layouts:
    """The layout search's answer for one fine-tuning and precision on `devices`."""

    devices: int
    nodes: int
    fine_tuning: str
    precision: str
    considered: int
    candidates: int
    fitting: list[LayoutRow]  # by preference
    stated: LayoutRow | None = None
    stated_problems: list[str] = field(default_factory=list)

    @property
    def best(self) -> LayoutRow | None:
        return self.fitting[0] if self.fitting else None

    def to_json(self) -> dict[str, Any]:
        return {"devices": self.devices, "nodes": self.nodes, "fine_tuning": self.fine_tuning,
                "precision": self.precision, "considered": self.considered, "candidates": self.candidates,
                "fitting": len(self.fitting),
                "best": [row.to_json() for row in self.fitting[:SHOWN]],
                "stated": self.stated.to_json() if self.stated else None, "stated_problems": self.stated_problems}


def sizes(arch: Architecture, seq: int) -> Sizes:
    return Sizes(arch.hidden, arch.heads, arch.kv_heads, arch.vocab, arch.layers,
                 arch.moe.experts if arch.moe else 0, seq)


def layers(arch: Architecture, seq: int, flash: bool) -> list[Layer]:
    """Each decoder layer (then each multi-token-prediction block) as the layouts split it."""
    result = []
    for index, mtp in [(i, False) for i in range(arch.layers)] + [(i, True) for i in range(arch.mtp_layers)]:
        linears, other = arch.layer(index, mtp)
        split = whole = experts = 0
        for linear in linears:
            if linear.name.startswith("mlp.experts."):
                experts += linear.params
            elif linear.name in ("mlp.gate", "mlp.shared_expert_gate"):
                whole += linear.params
            else:
                split += linear.params
        if mtp:  # the block's two norms and its projection of [hidden, embedding] back to hidden
            whole, split = whole + 2 * arch.hidden, split + 2 * arch.hidden * arch.hidden
        moe = bool(arch.moe) and index in (arch.mtp_moe_layers if mtp else arch.moe_layers)
        result.append(Layer(split, whole + other, experts, layer_bytes(arch, seq, arch.layers if mtp else index,
                                                                       flash), moe))
    return result


@dataclass(frozen=True)
class Setting:
    """What every layout of one question shares."""

    arch: Architecture
    layers: tuple[Layer, ...]
    seq: int
    flash: bool
    precision: str
    given: Given
    factors: Factors
    lora: int  # LoRA's trainable parameters over the whole model (0: full fine-tuning)
    linear: int  # the layers' split and routed parameters, over which LoRA's are spread


def _state(counts: Counts, precision: str, group: int, stage: int, given: Given) -> dict[str, int]:
    """The mechanisms' counted state of `counts` on one rank of a data-parallel group of `group`."""
    return state(MECHANISMS, counts, Strategy(precision=precision, devices=group,
                                              sharding_stage=stage if group > 1 else 0), given)


def stage_peak(setting: Setting, layout: Layout, index: int) -> StagePeak:
    """One rank of pipeline stage `index`."""
    arch, mp, pp, ep = setting.arch, layout.mp, layout.pp, layout.ep
    per_stage = arch.layers // pp
    own = list(setting.layers[index * per_stage:(index + 1) * per_stage])
    last = index == pp - 1
    if last:
        own += setting.layers[arch.layers:]  # the multi-token-prediction block
    embedding = arch.vocab * arch.hidden // mp
    split = sum(layer.split for layer in own) // mp
    dense = split + sum(layer.whole for layer in own) + (embedding if index == 0 else 0)
    dense += (embedding if not arch.tied or pp > 1 else 0) + arch.hidden if last else 0
    routed = sum(layer.experts for layer in own) // (ep if ep > 1 else mp)
    # (parameters, their linear layers', the data-parallel group their state is sharded over)
    groups = [(dense + routed, split + routed, layout.dp)] if ep == 1 else \
        [(dense, split, layout.dp), (routed, routed, layout.expert_group)]
    parts: dict[str, int] = {}
    for params, linear, group in groups:
        trainable = round(setting.lora * linear / setting.linear) if setting.lora else params
        counted = _state(Counts(params + (trainable if setting.lora else 0), trainable, matmul=linear),
                         setting.precision, group, layout.stage, setting.given)
        for part, size in counted.items():
            parts[part] = parts.get(part, 0) + size
    parts.update(_activations(setting, layout, index, own))
    allocator = int(sum(parts.values()) * setting.factors.fragmentation)
    return StagePeak(index, parts, allocator)


def _activations(setting: Setting, layout: Layout, index: int, own: list[Layer]) -> dict[str, int]:
    """The stage's activations, its logits (the last stage), what it sends and receives (pp > 1) and the all-to-all
    buffers (ep > 1), in bytes."""
    arch, seq, mp, sp = setting.arch, setting.seq, layout.mp, layout.sp
    decoder = own[:arch.layers // layout.pp]
    whole = whole_sbh(sp, arch.fused) * seq * arch.hidden
    layer = sum(tensor_split(lay.activations, mp, whole) for lay in decoder) / len(decoder)
    flight = in_flight(layout.pp, layout.vpp, index)
    held = flight * len(decoder)
    kept = KEPT * seq * arch.hidden / (mp if sp else 1)
    outside = 0.0
    if index == layout.pp - 1:
        outside = LOGITS * seq * arch.vocab / mp * (1 + arch.mtp_layers) + (0.0 if setting.flash else MASK * seq**2)
        outside += sum(tensor_split(lay.activations, mp, whole) for lay in own[len(decoder):])
        if mp > 1:  # the head's whole copy of its input (a column-parallel linear's)
            outside += WHOLE_PER_COLUMN * seq * arch.hidden * (1 + arch.mtp_layers)
        if sp:  # the final norm's two tensors, over the ranks
            outside -= WHOLE_NORMS / 2 * seq * arch.hidden * (1 - 1 / mp)
    pipeline = 0.0  # what a stage sends and receives: the last its input, the others per micro-batch in flight
    if layout.pp > 1:
        tokens = seq * arch.hidden / (mp if sp else 1)
        pipeline = PP_RECEIVED_SBH * tokens if index == layout.pp - 1 else \
            flight * (PP_SENT_SBH * tokens + (0.0 if setting.flash else PP_MASK * seq**2))
    plain = outside + held * (kept if layout.recompute else layer)
    total = max(plain, RECOMPUTE_OUTSIDE * outside + held * kept + RECOMPUTE_LAYER * layer) if layout.recompute \
        else plain
    factor = setting.factors.activations(MECHANISMS, Strategy(precision=setting.precision))
    total, outside = total * layout.micro_batch * factor, outside * layout.micro_batch * factor
    parts = {"activations": int(total - outside), "logits": int(outside)}
    if layout.pp > 1:
        parts["pipeline"] = int(pipeline * layout.micro_batch * factor)
    if layout.ep > 1 and arch.moe and any(lay.moe for lay in own):
        tokens = seq * layout.micro_batch / (mp if sp else 1)
        parts["dispatch"] = int(2 * tokens * arch.moe.top_k * arch.hidden * HALF_BYTES)
    return parts


def row(setting: Setting, layout: Layout, budget: Budget) -> LayoutRow:
    stages = [stage_peak(setting, layout, index) for index in range(layout.pp)]
    return LayoutRow(layout, stages, all(budget.fits(stage.reserved) for stage in stages))


def preference(layout: Layout) -> tuple[int, ...]:
    """The sort key of PREFERENCES (the lower preferred)."""
    return (layout.recompute, layout.mp * layout.pp, layout.pp, layout.ep, -layout.micro_batch, layout.stage,
            layout.vpp)


def search(arch: Architecture, seq: int, flash: bool, batch: int, devices: int, precision: str, given: Given,
           factors: Factors, budget: Budget, lora_rank: int | None = None,
           stated: Layout | None = None, nodes: int = 1) -> Layouts:
    """Every layout of `devices` on `nodes` nodes that can run the model, those predicted to fit by preference, and
    the stated layout's peak (or why it cannot run the model)."""
    shapes = tuple(layers(arch, seq, flash))
    setting = Setting(arch, shapes, seq, flash, precision, given, factors,
                      count(arch, lora_rank).trainable if lora_rank else 0,
                      sum(layer.split + layer.experts for layer in shapes))
    kept, considered = candidates(sizes(arch, seq), devices, batch, nodes)
    rows = [row(setting, layout, budget) for layout in kept]
    fitting = sorted((r for r in rows if r.fits), key=lambda r: preference(r.layout))
    answer = Layouts(devices, nodes, "LoRA" if lora_rank else "full", precision, considered, len(kept), fitting)
    if stated is not None:
        answer.stated_problems = problems(stated, sizes(arch, seq), nodes)
        if not answer.stated_problems:
            answer.stated = row(setting, stated, budget)
    return answer
