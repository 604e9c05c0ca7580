"""Per-rank memory of a Llama-style decoder known only by its sizes, for Paddle's auto_tuner (stdlib only: the tool
runs under whatever `python` is on PATH).

State: every parameter counted from the sizes (attention q/k/v/o, the SwiGLU MLP's gate/up/down, two RMSNorms per
layer; embeddings and an untied head), split as Megatron splits them (tensor parallel: the matmuls and the vocabulary
over the ranks, the norms replicated; pipeline parallel: the layers over the stages, the embedding on the first, the
head on the last; the largest stage counts), then sharding divides what its stage partitions. Bytes per parameter by
precision: fp32 4 + 4 + 8 (AdamW); O2 (PaddleNLP's default for Llama) 2 + 2 + 12 (fp32 master weights and moments),
4 for gradients with amp_master_grad; O1 4 + 4 + 8 and a half copy of the matmul weights.

Activations per layer and micro-batch, in bytes of fp32: ACTIVATION_SBH * s*b*h + ACTIVATION_SBF * s*b*f +
ACTIVATION_AS2B * a*s^2*b, fitted to vramtune's CPU probes of Llamas (bench/llama_activations.py); half of that under
AMP. Tensor parallel: what each rank holds whole (memory/parallel.py's whole_sbh, measured on 2 CPU ranks: each
column-parallel linear's copy of its input, the norms' tensors without sequence parallel), the rest over the ranks.
Recompute: full keeps each layer's input and one layer's working set; full_attn keeps the MLP's tensors too;
core_attn drops only the [s, s] attention tensors. Pipeline parallel (1F1B): the first stage holds its layers for as
many micro-batches as there are stages (L layers' worth), times 1 + (p - 1)/(p v) when interleaved. The logits, in
the head's stage, per sample and token: LOGITS_BYTES per vocabulary entry over the ranks. The tensor-parallel split
and the micro-batches in flight are memory/parallel.py's, which `estimate`'s layouts share.
"""
from __future__ import annotations

from dataclasses import dataclass

from vramtune.memory.parallel import in_flight, tensor_split, whole_sbh

# fitted to `vramtune measure` of PaddleFormers 1.2.0's Llama on Paddle 3.3.1 (CPU, fp32, SFT, full fine-tuning) at
# ten shapes: every peak within 0.3%, the activations within 0.4% (bench/llama_activations.py)
ACTIVATION_SBH = 55.7  # fp32 bytes per token and hidden unit saved per layer (norms, q/k/v, attention out, residual)
ACTIVATION_SBF = 16.2  # per token and intermediate unit (the SwiGLU's gate, up, activation and product)
ACTIVATION_AS2B = 3.95  # per head and token pair (the attention probabilities)
LOGITS_BYTES = 12.1  # per token and vocabulary entry outside the layers (the logits, the softmax, its gradient)
OUTSIDE_SBH = 13.4  # per token and hidden unit outside the layers (embedding output, final norm)
RESERVE = 0.08  # the GPU allocator's reserve beyond the allocated peak


@dataclass
class Llama:
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    vocab_size: int
    intermediate_size: int
    max_sequence_length: int
    num_key_value_heads: int | None = None

    @property
    def layer_params(self) -> int:
        h, kv = self.hidden_size, self.num_key_value_heads or self.num_attention_heads
        return 2 * h * h + 2 * h * (h * kv // self.num_attention_heads) + 3 * h * self.intermediate_size + 2 * h

    @property
    def params(self) -> int:
        return self.num_layers * self.layer_params + 2 * self.vocab_size * self.hidden_size + self.hidden_size


@dataclass
class Parallel:
    micro_batch: int = 1
    dp: int = 1
    mp: int = 1
    pp: int = 1
    vpp: int = 1
    sharding: int = 1
    stage: int = 0
    recompute: bool = False
    granularity: str = "full"
    sequence_parallel: bool = False


BYTES = {"fp32": (4, 4, 8), "O1": (4, 4, 8), "O2": (2, 2, 12)}  # weights, gradients, optimizer per parameter


def stage_params(model: Llama, parallel: Parallel) -> tuple[float, float]:
    """(parameters, matmul weights) of the largest pipeline stage on one tensor-parallel rank: its layers, and the
    embedding and head (one stage, pp == 1) or the head and the final norm (the last stage, the largest)."""
    h, layers = model.hidden_size, model.num_layers / parallel.pp
    matmul = (model.layer_params - 2 * h) * layers / parallel.mp
    vocab = model.vocab_size * h / parallel.mp
    params = matmul + 2 * h * layers + h + (2 * vocab if parallel.pp == 1 else vocab)
    return params, matmul + vocab


def state_bytes(model: Llama, parallel: Parallel, precision: str, master_grad: bool = False) -> float:
    params, matmul = stage_params(model, parallel)
    weights, gradients, optimizer = BYTES[precision]
    if precision == "O2" and master_grad:
        gradients = 4
    parts = {"weights": weights * params, "gradients": gradients * params, "optimizer": optimizer * params}
    partitioned = {1: ("optimizer",), 2: ("optimizer", "gradients"), 3: ("optimizer", "gradients", "weights")}
    if parallel.sharding > 1:
        for part in partitioned.get(parallel.stage, ()):
            parts[part] /= parallel.sharding
    copies = 2 * matmul if precision == "O1" else 0.0
    return sum(parts.values()) + copies


def activation_bytes(model: Llama, parallel: Parallel, precision: str) -> float:
    s, b, h = model.max_sequence_length, parallel.micro_batch, model.hidden_size
    a, f, t = model.num_attention_heads, model.intermediate_size, parallel.mp
    scores = ACTIVATION_AS2B * a * s * s * b
    whole = whole_sbh(parallel.sequence_parallel) * s * b * h
    layer = tensor_split(ACTIVATION_SBH * s * b * h + ACTIVATION_SBF * s * b * f + scores, t, whole)
    if parallel.recompute:
        kept = 4.0 * s * b * h / (t if parallel.sequence_parallel else 1)  # each layer's input, fp32
        if parallel.granularity == "core_attn":
            per_layer = layer - scores / t
        elif parallel.granularity == "full_attn":
            per_layer = kept + ACTIVATION_SBF * s * b * f / t
        else:
            per_layer = kept
        working = layer  # one layer rebuilt at a time in backward
    else:
        per_layer, working = layer, 0.0
    layers_held = model.num_layers * in_flight(parallel.pp, parallel.vpp, 0) / parallel.pp  # the first stage's
    outside = LOGITS_BYTES * s * b * model.vocab_size / t + OUTSIDE_SBH * s * b * h
    total = per_layer * layers_held + working + outside
    return total * (1.0 if precision == "fp32" else 0.5)


def per_rank_bytes(model: Llama, parallel: Parallel, precision: str = "O2", master_grad: bool = False) -> float:
    """What one rank's allocator reserves at the peak of a training step."""
    allocated = state_bytes(model, parallel, precision, master_grad) + activation_bytes(model, parallel, precision)
    return allocated * (1 + RESERVE)
