"""Hybrid-parallel layouts of a decoder on N devices (standard library only: estimating/llama.py, which Paddle's
auto_tuner runs under any `python`, shares the split).

Megatron's split, as Paddle's fleet and PaddleFormers 1.2 lay a model out: tensor parallel (mp) splits the matmuls,
the vocabulary and each layer's activations over its ranks but for what it leaves whole on every rank, measured on 2
CPU ranks (bench/parallel_ranks.py, below); pipeline parallel (pp) gives each stage L/pp layers, the first stage the
embedding and the last the head; under 1F1B stage k holds pp - k micro-batches in flight (measured at pp 2: the first
stage holds two micro-batches' layers), interleaved (vpp chunks per stage) Megatron's warm-up count of chunks.
Expert parallel (ep) gives each rank experts/ep whole experts (PaddleFormers 1.2: the routed experts are not split by
mp under ep; the ep group lies within a stage's dp x mp ranks and the experts' state is sharded over the rest of
them, `moe_sharding_parallel_size` = N / (pp x ep)).

The candidates are pruned as Paddle's auto_tuner prunes them (paddle/distributed/auto_tuner/prune.py: mp divides
hidden, vocab and heads, and the sequence with sequence parallel; pp divides the layers; vpp > 1 needs pp > 2, the
accumulation a multiple of pp and the layers a multiple of pp x vpp), with what PaddleFormers 1.2's
TrainingArguments asserts (pipeline parallel takes sharding stage 1 at most; expert parallel no plain data
parallel: its replicas are a sharding group) and what its layers need (mp divides the key/value heads; ep divides
the experts and the stage's dp x mp ranks; the accumulation at least pp).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# fp32 bytes per token and hidden unit of a decoder layer's activations that tensor parallel leaves whole on every
# rank, measured with PaddleFormers 1.2's Llama on 2 CPU ranks (bench/parallel_ranks.py: from 2 and 4 layers at
# hidden 64 and 128, 48.1 and 48.1 without sequence parallel, 32.0 and 32.0 with it; Korthikanti et al.'s 10 half
# bytes, 20 fp32, was the assumption before):
WHOLE_PER_COLUMN = 4.0  # each column-parallel linear keeps its own whole copy of its input: c_identity's (Paddle's
# GPU kernel allocates and copies it too: c_identity_kernel_impl.h), with sequence parallel the all-gathered input
WHOLE_NORMS = 16.0  # the two RMSNorms' inputs and normalised tensors, split by sequence parallel
WHOLE_REST = 12.0  # the rest of the measured whole bytes, with or without sequence parallel (not attributed)
COLUMNS = {False: 5, True: 2}  # column-parallel linears per layer: q, k, v, gate, up; fused: qkv, gate_up (assumed)
# pipeline parallel, measured at pp 2 (bench/parallel_ranks.py, hidden 64 and 128): a stage before the last holds 12
# fp32 bytes per token and hidden unit (what it sends and receives, not attributed further) and, with eager
# attention, the boolean mask (1 byte per token pair) for each micro-batch in flight; the last stage its received
# input, 4 per token and hidden unit (assumed alike for the middle stages of pp > 2)
PP_SENT_SBH = 12.0
PP_RECEIVED_SBH = 4.0
PP_MASK = 1.0
MAX_MP = 8  # auto_tuner's bound without candidates: tensor parallel within one node of 8


@dataclass(frozen=True)
class Layout:
    """One hybrid-parallel layout of N = dp x mp x pp devices, and the batch of one data-parallel replica."""

    dp: int = 1
    mp: int = 1
    pp: int = 1
    vpp: int = 1
    ep: int = 1
    stage: int = 0  # sharding stage over the dp ranks (0: plain data parallel)
    sp: bool = False  # sequence parallel
    micro_batch: int = 1
    accumulation: int = 1
    recompute: bool = False  # every layer (PaddleFormers' recompute_granularity full)

    @property
    def devices(self) -> int:
        return self.dp * self.mp * self.pp

    @property
    def expert_group(self) -> int:
        """The ranks one expert's state is replicated (and sharded) over: N / (pp x ep)."""
        return self.dp * self.mp // self.ep

    def label(self) -> str:
        parts = [f"dp{self.dp}"] + [f"{name}{value}" for name, value in
                                    (("tp", self.mp), ("pp", self.pp), ("vpp", self.vpp), ("ep", self.ep))
                                    if value > 1]
        if self.sp:
            parts.append("sp")
        if self.stage:
            parts.append(f"stage{self.stage}")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"dp": self.dp, "mp": self.mp, "pp": self.pp, "vpp": self.vpp, "ep": self.ep,
                "sharding_stage": self.stage, "sequence_parallel": self.sp, "micro_batch": self.micro_batch,
                "accumulation": self.accumulation, "recompute": self.recompute}


@dataclass(frozen=True)
class Sizes:
    """What the pruning reads of a model."""

    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    layers: int
    experts: int = 0  # 0: dense
    seq: int = 0


def whole_sbh(sp: bool, fused: bool = False) -> float:
    """fp32 bytes per token and hidden unit of a layer's activations every tensor-parallel rank holds whole."""
    return WHOLE_REST + WHOLE_PER_COLUMN * COLUMNS[fused] + (0.0 if sp else WHOLE_NORMS)


def tensor_split(layer: float, mp: int, whole: float) -> float:
    """One mp rank's share of a layer's activations: `whole` of them (whole_sbh's bytes, at most the layer's) on
    every rank, the rest over the ranks; the layer itself with mp 1."""
    if mp == 1:
        return layer
    whole = min(whole, layer)
    return whole + (layer - whole) / mp


def in_flight(pp: int, vpp: int, stage: int) -> float:
    """Micro-batches whose activations pipeline stage `stage` holds at its peak, in units of its L/pp layers: 1F1B
    pp - stage; interleaved, Megatron's warm-up chunks (2 (pp - stage - 1) + (vpp - 1) pp) and the one in steady
    state, each of L/(pp vpp) layers (the first stage: L (1 + (pp - 1)/(pp vpp)) layers' worth)."""
    if vpp == 1:
        return float(pp - stage)
    return (2 * (pp - stage - 1) + (vpp - 1) * pp + 1) / vpp


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def problems(layout: Layout, sizes: Sizes, nodes: int = 1) -> list[str]:
    """Why a layout cannot run the model on `nodes` nodes (empty: it can), every reason."""
    mp, pp, why = layout.mp, layout.pp, []
    if mp > min(MAX_MP, layout.devices // nodes):
        why.append(f"tp {mp} spans more than one node of {min(MAX_MP, layout.devices // nodes)} devices")
    if nodes > 1 and pp > nodes:
        why.append(f"pp {pp} > {nodes} nodes (auto_tuner's bound)")
    for name, size in (("hidden", sizes.hidden), ("heads", sizes.heads), ("kv-heads", sizes.kv_heads),
                       ("vocab", sizes.vocab)):
        if size % mp:
            why.append(f"tp {mp} does not divide {name} {size}")
    if layout.sp and (mp == 1 or (sizes.seq and sizes.seq % mp)):
        why.append(f"sequence parallel needs tp > 1 dividing the sequence {sizes.seq}")
    if sizes.layers % (pp * layout.vpp):
        why.append(f"pp {pp} x vpp {layout.vpp} does not divide the {sizes.layers} layers")
    if layout.vpp > 1 and (pp <= 2 or layout.accumulation % pp):
        why.append("vpp > 1 needs pp > 2 and the accumulation a multiple of pp")
    if layout.accumulation < pp:
        why.append(f"accumulation {layout.accumulation} < pp {pp}: the pipeline would idle")
    if pp > 1 and layout.stage > 1:
        why.append("pipeline parallel takes sharding stage 1 at most (PaddleFormers)")
    if layout.ep > 1:
        if not sizes.experts or sizes.experts % layout.ep:
            why.append(f"ep {layout.ep} does not divide the {sizes.experts} experts")
        if (layout.dp * mp) % layout.ep:
            why.append(f"ep {layout.ep} does not divide dp x tp {layout.dp * mp}")
        if layout.dp > 1 and not layout.stage:
            why.append("expert parallel takes no plain data parallel: the replicas must be a sharding group")
    if layout.dp == 1 and layout.stage:
        why.append("sharding needs dp > 1")
    return why


def candidates(sizes: Sizes, devices: int, batch: int, nodes: int = 1) -> tuple[list[Layout], int]:
    """Every layout of `devices` on `nodes` nodes that can run the model, and how many were considered: dp x tp x pp
    = devices (tp within a node of at most MAX_MP devices; with several nodes, pp at most the nodes), vpp 1 or 2, ep
    over the divisors of the experts, sharding stage 0-3, sequence parallel whenever tp > 1, every layer recomputed
    or none, each micro-batch of the replica's `batch` (a power of two dividing it)."""
    micro_batches = [m for m in (2**i for i in range(batch.bit_length())) if batch % m == 0]
    considered, kept = 0, []
    for mp in (d for d in divisors(devices) if d <= min(MAX_MP, devices // nodes)):
        for pp in divisors(devices // mp):
            dp = devices // (mp * pp)
            for vpp in (1, 2):
                for ep in divisors(dp * mp) if sizes.experts else [1]:
                    for stage in range(4) if dp > 1 else [0]:
                        for recompute in (False, True):
                            for micro in micro_batches:
                                considered += 1
                                layout = Layout(dp, mp, pp, vpp, ep, stage, mp > 1, micro, batch // micro,
                                                recompute)
                                if not problems(layout, sizes, nodes):
                                    kept.append(layout)
    return kept, considered
