"""A spec's estimate, predicted: every strategy the ladder would consider on a GPU and its per-rank peak from the
counts and the activation fit, and the notes that say what was measured, assumed and extrapolated."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from vramtune.core.records import Budget
from vramtune.core.strategy import AMP_PRECISIONS, SHARDING_STAGES, Strategy
from vramtune.estimating.prober import Prober
from vramtune.estimating.rows import recompute_levels
from vramtune.memory.sequence import CHECK_TOLERANCE, probe_sequences
from vramtune.memory.state import ActivationFit, Counts, Factors, Given, Row, row
from vramtune.plugins import MECHANISMS
from vramtune.spec import Spec


@dataclass
class SpecContext:
    """What the spec's rows and notes are told besides the spec."""

    devices: int
    counts: Counts
    fit: ActivationFit
    buffer_ratio: float  # data parallel's buffers over the gradients, measured at 2 ranks (0: one rank)
    blocks_probed: bool  # probes with every repeated block recomputed measured (the model has such blocks)


def strategies(spec: Spec, context: SpecContext) -> list[Strategy]:
    """Every strategy the ladder would consider on a GPU on the estimate's devices, in the rows' order: fp32, and
    the AMP modes the spec allows, least memory first; within each, every sharding stage with several devices unless
    the spec turns sharding off (none otherwise); within each, none, a quarter, half, three quarters, every counted
    layer recomputed, where the spec allows recompute and the fit says recomputing every layer saves memory (none
    otherwise); the spec's micro-batches innermost."""
    allowed = spec.settings["precision"].allowed
    precisions = ("fp32", *[precision for precision in AMP_PRECISIONS if precision in allowed])
    stages = SHARDING_STAGES if context.devices > 1 and spec.settings["sharding"] else (0,)
    fit, layers = context.fit, context.counts.layers
    saves = fit.s0 + fit.s1 * layers / fit.width_scale > 0
    levels = recompute_levels(layers) if spec.settings["recompute"].enabled and saves else [0]
    per_rank = spec.train.target_batch // context.devices
    return [Strategy(precision=precision, devices=context.devices, sharding_stage=stage, recomputed_blocks=blocks,
                     micro_batch=micro, accumulation=per_rank // micro)
            for precision in precisions for stage in stages for blocks in levels for micro in spec.micro_batches()]


def spec_rows(spec: Spec, factors: Factors, budget: Budget, context: SpecContext) -> list[Row]:
    """Every strategy's predicted per-rank peak, judged against the budget."""
    given = Given(spec.train.optimizer, spec.settings["precision"].master_grad, context.buffer_ratio)
    rows = []
    for strategy in strategies(spec, context):
        estimate_row = row(MECHANISMS, context.counts, context.fit, factors, strategy, given, gpu=True)
        estimate_row.fits = budget.fits(estimate_row.reserved)
        rows.append(estimate_row)
    return rows


def spec_notes(spec: Spec, factors: Factors, scale: float, context: SpecContext) -> list[str]:
    measured = (f", data parallel's fused gradient buffers (x{context.buffer_ratio:.2f} of the gradients at 2 ranks, "
                "kept at any number of ranks; sharding goes without them)" if context.buffer_ratio else "")
    notes = [f"measured on CPU: the counted state (exact), fp32 activations (probes){measured}; assumed "
             f"({factors.source}): AMP O1 activations x{factors.o1_activations:g} of fp32's, O2 "
             f"x{factors.o2_activations:g}, the GPU allocator's reserve +{factors.fragmentation:.0%}"]
    if scale < 1:
        notes.append(f"the probes were x{scale:g} as wide as the model (a full-width layer does not fit this "
                     "machine's probes): per-layer activations are assumed to scale with the width")
    if spec.source == "paddlenlp" and spec.model.config_fields.get("use_flash_attention"):
        notes.append("use_flash_attention: the CPU measures plain attention ([seq, seq] scores kept): over-stated "
                     "where flash attention runs")
    if spec.settings["recompute"].enabled and not context.blocks_probed:
        notes.append("recompute not estimated: the model has no repeated blocks vramtune recomputes")
    return notes


def sequence_notes(prober: Prober) -> list[str]:
    """How the probes at shorter sequences stood in for the model's (none where they did not run)."""
    if not prober.sequences:
        return []
    rungs = []
    for rung in itertools.count():
        sequences = probe_sequences(prober.seq_len, rung)
        if not sequences:
            break
        checked, *fitted = sequences
        rungs.append(f"{', '.join(map(str, fitted))} checked at {checked}")
    note = (f"the probes that keep every layer's activations ran at shorter sequences than the model's "
            f"{prober.seq_len}: their activations fitted as c + a s + b s^2 through {rungs[0]}"
            + "".join(f"; where it missed (by more than {CHECK_TOLERANCE:.0e} of it), through {r}" for r in rungs[1:])
            + f"; extrapolated to {prober.seq_len}")
    if prober.whole:
        note += "; not exact, so probed at the whole sequence: " + ", ".join(
            f"depth {k.depth or 'full'} m={k.micro_batch}" + (f" vocabulary {k.vocab:,}" if k.vocab else "")
            for k in prober.whole)
    return [note]
