"""The config.json count against the model PaddleFormers builds (lazily: no memory) where its code imports here
(Llama, ERNIE-4.5, ERNIE-4.5-MoE): every parameter, the trained ones, and LoRA's as PaddleFormers' SFT workflow
applies it (its own target modules per model type), tiny ones and the real ERNIE-4.5-0.3B. Exact equality."""
from __future__ import annotations

import json
import math

import pytest
from conftest import SPECS, needs_paddleformers

from vramtune.memory.architecture import LORA_TARGETS, architecture, count

pytestmark = [pytest.mark.paddle, needs_paddleformers]

TINY = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 1000, "rms_norm_eps": 1e-5},
    "ernie4_5": {"architectures": ["Ernie4_5_ForCausalLM"], "model_type": "ernie4_5", "hidden_size": 64,
                 "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "rms_norm_eps": 1e-5},
    "ernie4_5_moe": {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_size": 64,
                     "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 4,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "moe_num_experts": 4,
                     "moe_num_shared_experts": 2, "moe_k": 2, "moe_layer_start_index": 1, "moe_layer_end_index": 3,
                     "moe_layer_interval": 2, "vocab_size": 1000, "moe_use_aux_free": True, "rms_norm_eps": 1e-5},
}


TINY["ernie4_5 0.3B"] = json.loads((SPECS / "configs" / "ernie-4.5-0.3b.json").read_text())  # the real one


def built(config: dict, tmp_path, lora_rank: int | None) -> tuple[int, int, list[str]]:
    import paddle
    from paddleformers.cli.utils.llm_utils import get_lora_target_modules
    from paddleformers.peft import LoRAConfig, LoRAModel
    from paddleformers.transformers import AutoConfig, AutoModelForCausalLM

    (tmp_path / "config.json").write_text(json.dumps(config))
    with paddle.LazyGuard():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(tmp_path)))
        targets = get_lora_target_modules(model)
        if lora_rank:
            model = LoRAModel(model, LoRAConfig(target_modules=targets, r=lora_rank, lora_alpha=2 * lora_rank,
                                                merge_weights=False, dtype="float32"))
    parameters = list(model.parameters())
    return (sum(math.prod(p.shape) for p in parameters),
            sum(math.prod(p.shape) for p in parameters if not p.stop_gradient), targets)


@pytest.mark.parametrize("model_type", sorted(TINY))
@pytest.mark.parametrize("lora_rank", [None, 8])
def test_the_config_count_equals_the_model_paddleformers_builds(model_type, lora_rank, tmp_path):
    params, trainable, targets = built(TINY[model_type], tmp_path, lora_rank)
    counted = count(architecture(TINY[model_type]), lora_rank)
    assert (counted.params, counted.trainable) == (params, trainable)
    assert tuple(targets) == LORA_TARGETS[TINY[model_type]["model_type"]]  # vramtune matches PaddleFormers' own
