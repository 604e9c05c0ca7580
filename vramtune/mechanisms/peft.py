"""Parameter-efficient fine-tuning: LoRA and prefix tuning, built as PaddleNLP's llm fine-tuning script builds them
(llm/finetune_generation.py and llm/utils.py in 2.8.1): prefix tuning first, then LoRA with the script's target
modules for the architecture, alpha 2 x rank (4 with rslora), merge_weights off. The trainable set is the user's
choice, not searched; every other mechanism is measured under it (recompute saves less: frozen embeddings leave the
first layer's input without a gradient, so PaddleNLP does not recompute it). Configuration only: `lora_path` and
`prefix_path` are read for their saved configuration (which replaces rank and targets, as in the script), never
for weights.

Spec: `train.lora: true` or `{rank, alpha, target_modules, rslora, pissa, use_quick_lora, lora_plus_scale}`;
`train.prefix_tuning: true` or `{tokens}`. A PaddleNLP arguments file: `lora`, `lora_rank`, `lora_path`, `rslora`,
`lora_plus_scale`, `pissa`, `use_quick_lora`, `prefix_tuning`, `num_prefix_tokens`, `prefix_path`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vramtune.core.reading import Section, positive
from vramtune.mechanisms.base import Mechanism

# the llm script's get_lora_target_modules, by base_model_prefix (GPT: llm/gpt-3's own script)
LORA_TARGETS = {
    "chatglm": [".*query_key_value.*", ".*dense.*", ".*dense_h_to_4h.*", ".*dense_4h_to_h.*"],
    "chatglm_v2": [".*query.*", ".*key.*", ".*value.*", ".*dense.*", ".*dense_h_to_4h.*", ".*dense_4h_to_h.*"],
    "bloom": [".*query_key_value.*", ".*dense.*", ".*dense_h_to_4h.*", ".*dense_4h_to_h.*"],
    "llama": [".*q_proj.*", ".*v_proj.*", ".*k_proj.*", ".*o_proj.*", ".*qkv_proj.*", ".*gate_proj.*",
              ".*down_proj.*", ".*up_proj.*", ".*gate_up_fused_proj.*"],
    "opt": [".*project_in.*", ".*project_out.*", ".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*qkv_proj.*",
            ".*out_proj.*", ".*linear1.*", ".*linear2.*"],
    "qwen": [".*attn.c_attn.*", ".*attn.c_proj.*", ".*mlp.w1.*", ".*mlp.w2.*", ".*mlp.c_proj.*"],
    "mixtral": [".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*o_proj.*", ".*w1.*", ".*w2.*", ".*w3.*"],
    "gpt": [".*qkv_proj.*", ".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*linear1.*", ".*linear2.*", ".*out_proj.*"],
}
# the llm script's get_prefix_tuning_params: the architectures it supports, the config's layer count, hidden size
# and query-group attributes, and its past-key-value post-processing
PREFIX_MODELS = {
    "chatglm": ("num_hidden_layers", "hidden_size", None, "chatglm_postprocess_past_key_value"),
    "chatglm_v2": ("num_layers", "hidden_size", "multi_query_group_num", "chatglm_postprocess_past_key_value"),
    "bloom": ("n_layer", "n_embed", None, "bloom_postprocess_past_key_value"),
    "llama": ("num_hidden_layers", "hidden_size", None, "llama_postprocess_past_key_value"),
    "qwen": ("num_hidden_layers", "hidden_size", None, "qwen_postprocess_past_key_value"),
}
LORA_KEYS = ("rank", "alpha", "target_modules", "rslora", "pissa", "use_quick_lora", "lora_plus_scale")


@dataclass
class Lora:
    rank: int = 8
    alpha: float | None = None  # None: as the llm script, 2 x rank (4 with rslora)
    target_modules: list[str] | None = None  # regexes; None: the llm script's for the architecture
    rslora: bool = False
    pissa: bool = False
    use_quick_lora: bool = False
    lora_plus_scale: float = 1.0

    @property
    def scale_alpha(self) -> float:
        return self.alpha if self.alpha is not None else 4.0 if self.rslora else 2.0 * self.rank


@dataclass
class PeftSettings:
    lora: Lora | None = None
    prefix_tokens: int | None = None  # prefix tuning's virtual tokens


def _lora(value: Any, section: Section) -> Lora | None:
    """train.lora: true, or a mapping of LORA_KEYS."""
    if value is True:
        return Lora()
    if value in (False, None):
        return None
    keys = Section(section.problems, section.file, section.key("lora"), value)
    lora = Lora(rank=keys.get("rank", int, 8, check=positive(1 << 16)) or 8,
                alpha=keys.get("alpha", float, None, check=positive()),
                target_modules=keys.get("target_modules", list, None),
                rslora=bool(keys.get("rslora", bool, False)), pissa=bool(keys.get("pissa", bool, False)),
                use_quick_lora=bool(keys.get("use_quick_lora", bool, False)),
                lora_plus_scale=keys.get("lora_plus_scale", float, 1.0, check=positive()) or 1.0)
    keys.finish()
    return lora


class Peft(Mechanism):
    name = "peft"

    def read(self, spec) -> PeftSettings:
        train = spec.train
        settings = PeftSettings()
        raw_lora, raw_prefix = train.data.get("lora"), train.data.get("prefix_tuning")
        train.seen.update({"lora", "prefix_tuning"})
        if raw_lora is not None and not isinstance(raw_lora, (bool, dict)):
            train.fail("lora", f"must be true, false or a mapping of {', '.join(LORA_KEYS)}, got {raw_lora!r}")
        elif raw_lora is not None:
            settings.lora = _lora(raw_lora, train)
        if isinstance(raw_prefix, dict):
            prefix = Section(train.problems, train.file, train.key("prefix_tuning"), raw_prefix)
            settings.prefix_tokens = prefix.get("tokens", int, 128, check=positive(1 << 16))
            prefix.finish()
        elif raw_prefix is True:
            settings.prefix_tokens = 128
        elif raw_prefix not in (None, False):
            train.fail("prefix_tuning", f"must be true, false or a mapping {{tokens: N}}, got {raw_prefix!r}")
        if (settings.lora or settings.prefix_tokens) and spec.model.data.get("source") != "paddlenlp":
            train.fail("lora" if settings.lora else "prefix_tuning",
                       "needs a PaddleNLP model (model.source: paddlenlp): PaddleNLP's peft builds it")
        return settings

    def child_settings(self, settings: PeftSettings, budget) -> dict[str, Any] | None:
        return dataclasses.asdict(settings) if settings.lora or settings.prefix_tokens else None


    # -- child side --------------------------------------------------------------------------------------
    def prepare_model(self, model, strategy, settings):
        """Prefix tuning, then LoRA, as the llm script applies them; the trainable and total parameter counts."""
        if settings:
            if settings["prefix_tokens"]:
                model = _with_prefix(model, settings["prefix_tokens"])
            if settings["lora"]:
                model = _with_lora(model, Lora(**settings["lora"]))
        sizes = [(math.prod(p.shape), p.stop_gradient) for p in model.parameters()]  # lazy parameters have shapes
        facts = {"trainable_params": sum(size for size, frozen in sizes if not frozen),
                 "total_params": sum(size for size, _ in sizes)}
        if settings:
            facts["peft"] = settings
        return model, facts


def _architecture(model: Any, what: str, supported: dict[str, Any]) -> str:
    from vramtune.core.errors import BuildError

    prefix = getattr(model, "base_model_prefix", None)
    if prefix not in supported:
        raise BuildError(f"train.{what}: PaddleNLP's llm script has no {what} for {prefix or type(model).__name__} "
                         f"models (it has: {', '.join(supported)})")
    return prefix


def _with_lora(model: Any, lora: Lora) -> Any:
    import paddle
    from paddlenlp.peft import LoRAConfig, LoRAModel

    targets = lora.target_modules or LORA_TARGETS[_architecture(model, "lora", LORA_TARGETS)]
    config = LoRAConfig(target_modules=targets, r=lora.rank, lora_alpha=lora.scale_alpha, rslora=lora.rslora,
                        pissa=lora.pissa, lora_plus_scale=lora.lora_plus_scale, merge_weights=False,
                        dtype=paddle.get_default_dtype(), use_quick_lora=lora.use_quick_lora)
    return LoRAModel(model, config)


def _with_prefix(model: Any, tokens: int) -> Any:
    import paddle
    from paddlenlp.peft import PrefixConfig, PrefixModelForCausalLM, prefix

    from vramtune.core.errors import BuildError

    architecture = _architecture(model, "prefix_tuning", PREFIX_MODELS)
    layers, hidden, groups, postprocess = PREFIX_MODELS[architecture]
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if architecture == "llama" and kv_heads != heads:
        raise BuildError(f"train.prefix_tuning: this Llama has grouped-query attention ({kv_heads} key/value heads for "
                         f"{heads} heads); PaddleNLP 2.8.1's llm script passes no group count and fails on it too")
    prefix_config = PrefixConfig(num_prefix_tokens=tokens, num_attention_heads=heads,
                                 num_hidden_layers=getattr(config, layers), hidden_size=getattr(config, hidden),
                                 multi_query_group_num=getattr(config, groups) if groups else None,
                                 dtype=paddle.get_default_dtype())
    return PrefixModelForCausalLM(model=model, prefix_config=prefix_config,
                                  postprocess_past_key_value=getattr(prefix, postprocess))


MECHANISM = Peft()
