"""A decoder's parameters counted from its config.json alone (Paddle-free): for models whose code cannot be imported
here (PaddleFormers' Qwen2/Qwen3/Qwen3-MoE/DeepSeek need `paddlefleet`, which is not on PyPI) and as a fast path for
the decoders it knows (COUNTED: Llama, Qwen2/3 and their MoE, DeepSeek-V2/V3, ERNIE-4.5 and its MoE; any other
model_type is refused, its layers may differ). The layers are laid out as PaddleFormers builds them (fused q/k/v
and gate/up where it fuses them), so that LoRA's trainable count follows PaddleFormers' target-module patterns
(cli/utils/llm_utils.py).

Counted per layer: attention (multi-head or grouped-query with num_key_value_heads and head_dim; DeepSeek's latent
attention with q_lora_rank, kv_lora_rank and the nope/rope/v head sizes), the MLP (dense intermediate_size) or the
mixture of experts (every routed expert resident, the shared experts, the router), two RMSNorms; outside the layers
the embeddings, the final norm and the head (absent when tied); ERNIE-4.5-MoE's multi-token-prediction block, which
PaddleFormers builds by default.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# qkv_proj, up_gate_proj (Qwen2.5-VL's language model is PaddleFormers' Qwen2: vision.py)
FUSED = ("ernie4_5", "ernie4_5_moe", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "glm4_moe", "qwen2_5_vl")
# PaddleFormers ties the head to the embeddings unless the configuration says otherwise or its class defaults to not
UNTIED_BY_DEFAULT = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3")
QKV_BIAS = ("qwen2", "qwen2_moe", "qwen2_5_vl")  # q/k/v biases whatever the config says
QK_NORM = ("qwen3", "qwen3_moe")  # an RMSNorm over each head's queries and keys
MTP_BUILT = ("ernie4_5_moe",)  # multi-token prediction layers PaddleFormers builds (num_nextn_predict_layers)
MTP_DEFAULT = {"ernie4_5_moe": 1}

# PaddleFormers 1.2's LoRA target modules (cli/utils/llm_utils.py get_lora_target_modules), matched with re.fullmatch
_QWEN = (".*qkv_proj.*", ".*up_gate_proj.*", ".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*o_proj.*", ".*gate_proj.*",
         ".*down_proj.*", ".*up_proj.*")
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": (".*q_proj.*", ".*v_proj.*", ".*k_proj.*", ".*o_proj.*", ".*qkv_proj.*", ".*gate_proj.*",
              ".*down_proj.*", ".*up_proj.*", ".*gate_up_fused_proj.*"),
    "qwen2": _QWEN, "qwen3": _QWEN, "qwen2_moe": _QWEN, "qwen3_moe": (*_QWEN, ".*mlp.grouped_gemm_experts"),
    "deepseek_v3": (".*q_proj.*", ".*q_a_proj.*", ".*q_b_proj.*", ".*kv_a_proj_with_mqa.*", ".*kv_b_proj.*",
                    ".*kv_b_proj.*", ".*o_proj.*", ".*mlp.gate_proj.*", ".*mlp.up_proj.*", ".*mlp.down_proj.*"),
    "ernie4_5": (".*qkv_proj.*", ".*up_gate_proj.*", ".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*o_proj.*",
                 ".*up_proj.*", ".*gate_proj.*", ".*down_proj.*", ".*spatial_linear.0.*", ".*spatial_linear.2.*",
                 ".*temporal_linear.0.*", ".*temporal_linear.2.*"),
}
LORA_TARGETS["ernie4_5_moe"] = LORA_TARGETS["ernie4_5"]
LORA_TARGETS["deepseek_v2"] = LORA_TARGETS["deepseek_v3"]
COUNTED = tuple(sorted(LORA_TARGETS))  # the model types whose layers this count lays out as PaddleFormers builds them


class ArchitectureError(ValueError):
    """A config.json this count cannot read (the message names the key, not the file)."""


@dataclass(frozen=True)
class Linear:
    name: str  # as PaddleFormers names the layer inside a decoder layer, e.g. "self_attn.qkv_proj"
    inputs: int
    outputs: int
    bias: bool = False

    @property
    def params(self) -> int:
        return self.inputs * self.outputs + (self.outputs if self.bias else 0)


@dataclass(frozen=True)
class Moe:
    experts: int
    top_k: int
    intermediate: int  # each routed expert's
    shared_intermediate: int = 0  # the shared experts together (one MLP of this width)
    shared_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert
    router_bias: bool = False  # a non-trained per-expert score correction (aux-loss-free routing)


@dataclass
class Architecture:
    """The sizes of a decoder as its config.json gives them."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tied: bool
    bias: bool = False
    moe: Moe | None = None
    moe_layers: frozenset[int] = frozenset()
    mla: dict[str, int] | None = None  # q_lora_rank (0: none), kv_lora_rank, qk_nope, qk_rope, v_head_dim
    mtp_layers: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def fused(self) -> bool:
        return self.model_type in FUSED

    def attention(self) -> list[Linear]:
        h, b = self.hidden, self.bias
        if self.mla:
            m, a = self.mla, self.heads
            qk = m["qk_nope"] + m["qk_rope"]
            q = ([Linear("self_attn.q_a_proj", h, m["q_lora_rank"]), Linear("self_attn.q_b_proj", m["q_lora_rank"],
                                                                           a * qk)]
                 if m["q_lora_rank"] else [Linear("self_attn.q_proj", h, a * qk)])
            return [*q, Linear("self_attn.kv_a_proj_with_mqa", h, m["kv_lora_rank"] + m["qk_rope"]),
                    Linear("self_attn.kv_b_proj", m["kv_lora_rank"], a * (m["qk_nope"] + m["v_head_dim"])),
                    Linear("self_attn.o_proj", a * m["v_head_dim"], h)]
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        qkv_bias = b or self.model_type in QKV_BIAS
        projections = ([Linear("self_attn.qkv_proj", h, q + 2 * kv, qkv_bias)] if self.fused else
                       [Linear("self_attn.q_proj", h, q, qkv_bias), Linear("self_attn.k_proj", h, kv, qkv_bias),
                        Linear("self_attn.v_proj", h, kv, qkv_bias)])
        return [*projections, Linear("self_attn.o_proj", q, h, b)]

    def mlp(self, prefix: str, width: int) -> list[Linear]:
        h, b = self.hidden, self.bias
        up = ([Linear(f"{prefix}up_gate_proj", h, 2 * width, b)] if self.fused else
              [Linear(f"{prefix}gate_proj", h, width, b), Linear(f"{prefix}up_proj", h, width, b)])
        return [*up, Linear(f"{prefix}down_proj", width, h, b)]

    def layer(self, index: int, mtp: bool = False) -> tuple[list[Linear], int]:
        """A decoder layer's linear layers (named as PaddleFormers names them) and its other parameters (norms, the
        router's non-trained bias)."""
        linears, other = self.attention(), 2 * self.hidden
        if self.mla:
            other += self.mla["kv_lora_rank"] + self.mla["q_lora_rank"]  # the latent norms
        if self.model_type in QK_NORM:
            other += 2 * self.head_dim
        if self.moe is None or index not in (self.mtp_moe_layers if mtp else self.moe_layers):
            return linears + self.mlp("mlp.", self.intermediate), other
        moe = self.moe
        linears.append(Linear("mlp.gate", self.hidden, moe.experts))
        for expert in range(moe.experts):
            linears += self.mlp(f"mlp.experts.{expert}.", moe.intermediate)
        if moe.shared_intermediate:
            linears += self.mlp("mlp.shared_experts.", moe.shared_intermediate)
        if moe.shared_gate:
            linears.append(Linear("mlp.shared_expert_gate", self.hidden, 1))
        return linears, other + (moe.experts if moe.router_bias else 0)

    @property
    def mtp_moe_layers(self) -> frozenset[int]:
        return frozenset(i for i in range(self.mtp_layers) if i in self.moe_layers)


@dataclass
class Count:
    params: int
    trainable: int
    matmul: int  # linear weights (AMP O1 keeps a half copy of each)
    active: int  # parameters one token passes through (top-k routed experts)
    embeddings: int
    lora_targets: int  # linear layers LoRA wraps


def _first(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    return next((config[key] for key in keys if config.get(key) is not None), default)


def _moe_layers(config: dict[str, Any], layers: int) -> frozenset[int]:
    """Which layers hold experts, by each family's keys."""
    if "first_k_dense_replace" in config or "moe_layer_freq" in config:  # DeepSeek
        start, every = config.get("first_k_dense_replace", 0), config.get("moe_layer_freq", 1)
        return frozenset(i for i in range(layers) if i >= start and i % every == 0)
    if "moe_layer_start_index" in config or "moe_num_experts" in config:  # ERNIE-4.5
        start, end = config.get("moe_layer_start_index", 0), config.get("moe_layer_end_index", -1)
        end = layers - 1 if end in (-1, None) else end
        every = config.get("moe_layer_interval", 1)
        return frozenset(i for i in range(layers) if (i + 1) % every == 0 and start <= i <= end)
    only, step = set(config.get("mlp_only_layers") or ()), config.get("decoder_sparse_step", 1)  # Qwen MoE
    return frozenset(i for i in range(layers) if i not in only and (i + 1) % step == 0)


def _require(config: dict[str, Any], key: str, *aliases: str) -> int:
    value = _first(config, key, *aliases)
    if not isinstance(value, int) or value <= 0:
        raise ArchitectureError(f"{key}: a positive integer is required, got {value!r}")
    return value


def architecture(config: dict[str, Any]) -> Architecture:
    """The sizes of a decoder's config.json (a text_config inside a multimodal one is not read)."""
    model_type = str(config.get("model_type") or "")
    if not model_type:
        raise ArchitectureError("model_type: is required (which architecture the sizes describe)")
    if model_type not in COUNTED:
        raise ArchitectureError(f"model_type: {model_type!r} is not counted here (its layers are not laid out as "
                                f"for a decoder this count knows: {', '.join(COUNTED)})")
    hidden = _require(config, "hidden_size")
    heads = _require(config, "num_attention_heads")
    layers = _require(config, "num_hidden_layers")
    experts = _first(config, "num_experts", "n_routed_experts", "moe_num_experts", default=0)
    moe = None
    if experts:
        intermediate = _require(config, "moe_intermediate_size")
        shared = _first(config, "n_shared_experts", "moe_num_shared_experts", default=0) * intermediate
        shared = _first(config, "shared_expert_intermediate_size", default=shared)
        moe = Moe(experts, _require(config, "num_experts_per_tok", "moe_k"), intermediate, shared,
                  shared_gate=model_type == "qwen2_moe",
                  router_bias=bool(config.get("moe_use_aux_free")) or config.get("topk_method") == "noaux_tc")
    mla = None
    if config.get("kv_lora_rank"):
        mla = {"q_lora_rank": config.get("q_lora_rank") or 0, "kv_lora_rank": config["kv_lora_rank"],
               "qk_nope": _require(config, "qk_nope_head_dim"), "qk_rope": _require(config, "qk_rope_head_dim"),
               "v_head_dim": _require(config, "v_head_dim")}
    tied = config.get("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT)
    mtp = (config.get("num_nextn_predict_layers", MTP_DEFAULT.get(model_type, 0)) or 0) \
        if model_type in MTP_BUILT else 0
    return Architecture(model_type, hidden, layers, heads, _first(config, "num_key_value_heads", default=heads),
                        _first(config, "head_dim", default=hidden // heads), _require(config, "vocab_size"),
                        _first(config, "intermediate_size", default=0), bool(tied),
                        bool(config.get("use_bias") or config.get("attention_bias")) if model_type.startswith("ernie")
                        else False, moe, _moe_layers(config, layers) if moe else frozenset(), mla, mtp, config)


def read_config(path: Path) -> dict[str, Any]:
    """A model folder's config.json (or the file itself)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise ArchitectureError("no such file (a model folder needs its config.json)") from None
    except json.JSONDecodeError as error:
        raise ArchitectureError(f"not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ArchitectureError("not a JSON object")
    return config


def count(arch: Architecture, lora_rank: int | None = None, targets: list[str] | None = None,
          prefix: str = "model") -> Count:
    """Every parameter as PaddleFormers builds the model; trainable: all (lora_rank None) or LoRA's A and B on the
    linear layers PaddleFormers' target patterns match (the frozen weights not). `targets` and `prefix`: a
    vision-language model's patterns and where its decoder's layers sit (vision.py)."""
    patterns = [re.compile(p) for p in targets or LORA_TARGETS.get(arch.model_type, LORA_TARGETS["llama"])]
    params = matmul = active = lora = targets = 0
    for index, mtp in [(i, False) for i in range(arch.layers)] + [(i, True) for i in range(arch.mtp_layers)]:
        linears, other = arch.layer(index, mtp)
        where = "model.mtp_block" if mtp else f"{prefix}.layers"
        for linear in linears:
            params += linear.params
            matmul += linear.inputs * linear.outputs
            if not _idle_expert(arch, linear):
                active += linear.params
            if lora_rank and any(p.fullmatch(f"{where}.{index}.{linear.name}") for p in patterns):
                lora += lora_rank * (linear.inputs + linear.outputs)
                targets += 1
        params += other
        active += other
        if mtp:  # the block's two norms and its projection of [hidden, embedding] back to hidden
            params += 2 * arch.hidden + 2 * arch.hidden * arch.hidden
            matmul += 2 * arch.hidden * arch.hidden
    embeddings = arch.vocab * arch.hidden
    head = 0 if arch.tied else embeddings
    params += embeddings + head + arch.hidden
    matmul += head
    active += embeddings + head + arch.hidden
    trainable = lora if lora_rank else params - _router_bias(arch)
    return Count(params + lora, trainable, matmul, active, embeddings, targets)


def _idle_expert(arch: Architecture, linear: Linear) -> bool:
    """A routed expert beyond the top-k a token passes through: resident, not active (experts 0..k-1 stand for the k
    a token is routed to; they are all the same size)."""
    return arch.moe is not None and linear.name.startswith("mlp.experts.") \
        and int(linear.name.split(".")[2]) >= arch.moe.top_k


def _router_bias(arch: Architecture) -> int:
    """The aux-loss-free routers' score corrections: parameters, never trained."""
    if not (arch.moe and arch.moe.router_bias):
        return 0
    moe_layers = len(arch.moe_layers) + len(arch.mtp_moe_layers)
    return moe_layers * arch.moe.experts
