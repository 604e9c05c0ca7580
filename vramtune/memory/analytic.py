"""Activations of a decoder known only by its config.json (Paddle-free), for models whose code cannot be built here.

Per layer and sample, fp32 bytes (the form of Korthikanti et al. 2022's per-layer count, s b h (34 + 5 a s / h) in
half precision, with coefficients fitted to what Paddle keeps):

    s (C_h h + C_kv kv + C_f f) + C_a a s^2

s the sequence, h the hidden size, kv the key/value width (heads x head size), f the intermediate size a token passes
through (a dense MLP's; in a mixture of experts, the top-k routed experts' and the shared experts': only those hold
activations), a the heads; in an MoE layer also each routed copy of a token's input and output (MOE_DISPATCH per
hidden unit and routed expert: assumed, since PaddleFormers' MoE layer does not run on CPU). Outside the layers,
per sample: LOGITS s V (the logits and the loss's copies) + MASK s^2 (the attention mask). Eager attention keeps
the [s, s] terms; flash attention (PaddleFormers' default, flashmask, on a GPU) keeps neither (assumed).

The coefficients were fitted to PaddleFormers 1.2's Llama (separate q/k/v and gate/up projections) and ERNIE-4.5
(fused) on CPU, fp32, eager attention, at four shapes each, measured as the host allocator's peak of a training step
(AdamW) less its weights, gradients and optimizer state, between 1 and 2 layers at 4 and 8 samples
(bench/estimate_activations.py remeasures them; a held-out shape of each, h=320, s=384, at 2 and 4 layers and 8
samples: Llama +3.0% and +1.0%, ERNIE-4.5 +6.8% and +6.2% over the measured; every layer of 4 recomputed: +2.8%
and +8.0%). Recompute of n of L layers: each recomputed layer keeps only its input (4 s h); backward then peaks
either in the loss's backward or while a layer is rebuilt (RECOMPUTE_LAYER, RECOMPUTE_OUTSIDE).
"""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.memory.architecture import Architecture


@dataclass(frozen=True)
class Coefficients:
    hidden: float  # fp32 bytes per token and hidden unit
    kv: float  # per token and key/value unit
    intermediate: float  # per token and intermediate unit
    scores: float  # per head and token pair (eager attention)


SEPARATE = Coefficients(hidden=39.72, kv=11.80, intermediate=13.75, scores=4.38)  # PaddleFormers' Llama
FUSED = Coefficients(hidden=21.53, kv=42.16, intermediate=13.75, scores=9.59)  # PaddleFormers' ERNIE-4.5
LOGITS = 12.0  # per token and vocabulary entry
FLASH = ("flashmask", "sdpa", "flash_attention")  # attention implementations that keep no [s, s] tensor on a GPU
MASK = 17.7  # per token pair, eager attention's mask
MOE_DISPATCH = 8.0  # per token, hidden unit and routed expert: its dispatched input and its output (assumed)
KEPT = 4.0  # per token and hidden unit: what a recomputed layer keeps (its input)
# with layers recomputed, backward peaks while one layer is rebuilt: its activations and gradients (x RECOMPUTE_LAYER
# of a layer's) beside part of what is outside the layers (x RECOMPUTE_OUTSIDE), fitted at 4 layers of the first
# shape of each family (bench/estimate_activations.py)
RECOMPUTE_LAYER = 1.16
RECOMPUTE_OUTSIDE = 0.38


@dataclass
class AnalyticActivations:
    """fp32 activations of one sample's layers and of what is outside them; the same interface as the probes' fit
    (activations(layers, micro_batch, recomputed)), so every strategy's row is computed the same way."""

    layer: float  # bytes per sample of the average layer
    outside: float  # bytes per sample outside the layers
    kept: float  # bytes per sample a recomputed layer keeps
    layers: int
    floor: float = 0.0

    def activations(self, layers: int, micro_batch: int, recomputed: int) -> float:
        held = (layers - recomputed) * self.layer + recomputed * self.kept
        plain = self.outside + held  # the peak while the loss's backward runs
        if not recomputed:
            return micro_batch * plain
        return micro_batch * max(plain, RECOMPUTE_OUTSIDE * self.outside + held + RECOMPUTE_LAYER * self.layer)


def layer_bytes(arch: Architecture, seq: int, index: int, flash: bool) -> float:
    """One sample's fp32 activations in layer `index`."""
    c = FUSED if arch.fused else SEPARATE
    if arch.mla:
        kv = arch.heads * (arch.mla["qk_nope"] + arch.mla["qk_rope"] + arch.mla["v_head_dim"]) // 2
    else:
        kv = arch.kv_heads * arch.head_dim
    per_token = c.hidden * arch.hidden + c.kv * kv
    if arch.moe and index in arch.moe_layers:
        moe = arch.moe
        per_token += c.intermediate * (moe.top_k * moe.intermediate + moe.shared_intermediate)
        per_token += MOE_DISPATCH * moe.top_k * arch.hidden
    else:
        per_token += c.intermediate * arch.intermediate
    return seq * per_token + (0.0 if flash else c.scores * arch.heads * seq * seq)


def activations(arch: Architecture, seq: int, flash: bool) -> AnalyticActivations:
    """The model's per-sample activations: its layers averaged (dense and MoE layers differ), and outside them the
    logits, the mask (eager attention) and a multi-token-prediction layer where the model has one."""
    per_layer = [layer_bytes(arch, seq, index, flash) for index in range(arch.layers)]
    outside = LOGITS * seq * arch.vocab + (0.0 if flash else MASK * seq * seq)
    outside += arch.mtp_layers * (layer_bytes(arch, seq, arch.layers, flash) + LOGITS * seq * arch.vocab)
    return AnalyticActivations(sum(per_layer) / arch.layers, outside, KEPT * seq * arch.hidden, arch.layers)
