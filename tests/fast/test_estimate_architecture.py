"""Parameters counted from real models' config.json alone (no Paddle), against the totals their publishers give."""
from __future__ import annotations

import dataclasses

import pytest
from conftest import SPECS

from vramtune.memory.architecture import ArchitectureError, architecture, count, read_config

CONFIGS = SPECS / "configs"


def counted(name: str, **changes) -> tuple:
    arch = dataclasses.replace(architecture(read_config(CONFIGS / f"{name}.json")), **changes)
    return arch, count(arch)


def test_qwen3_8b_dense_grouped_query_attention_untied():
    """Qwen/Qwen3-8B: 8.2B parameters, 6.95B without the embeddings (its model card); q/k norms per head."""
    _, total = counted("qwen3-8b")
    assert total.params == total.trainable == total.active == 8_190_735_360
    assert round((total.params - 2 * total.embeddings) / 1e9, 2) == 6.95
    lora = count(architecture(read_config(CONFIGS / "qwen3-8b.json")), lora_rank=8)
    # PaddleFormers fuses q/k/v and gate/up: r (in + out) on qkv_proj, o_proj, up_gate_proj, down_proj per layer
    per_layer = 8 * ((4096 + 4096 + 2 * 1024) + (4096 + 4096) + (4096 + 2 * 12288) + (12288 + 4096))
    assert lora.trainable == 36 * per_layer == 18_284_544 and lora.lora_targets == 36 * 4
    assert lora.params == total.params + lora.trainable


def test_qwen3_30b_a3b_every_expert_resident_top_k_active():
    """Qwen/Qwen3-30B-A3B: 30.5B in all, 3.3B activated (its model card): 128 experts, 8 per token."""
    _, total = counted("qwen3-30b-a3b")
    assert total.params == 30_532_122_624 and total.active == 3_353_032_704
    assert round(total.params / 1e9, 1) == 30.5 and round(total.active / 1e9, 1) == 3.4  # 3.35B: "3.3B"


def test_ernie_45_21b_a3b_shared_experts_tied_embeddings_and_paddleformers_mtp_layer():
    """baidu/ERNIE-4.5-21B-A3B: 21B in all, 3B activated; Hugging Face's weights 21.8B (no multi-token-prediction
    layer). PaddleFormers builds one by default (num_nextn_predict_layers=1): a dense layer, two norms, a 2h x h
    projection."""
    arch, total = counted("ernie-4.5-21b-a3b")
    assert arch.moe_layers == frozenset(range(1, 28)) and arch.mtp_layers == 1 and arch.tied
    _, published = counted("ernie-4.5-21b-a3b", mtp_layers=0)
    assert published.params == 21_825_437_888 and round(published.params / 1e9, 1) == 21.8
    assert round(published.active / 1e9) == 3
    h = 2560
    mtp = (h * (20 * 128 + 2 * 4 * 128) + 20 * 128 * h) + 3 * h * 12288 + 2 * h + 2 * h + 2 * h * h
    assert total.params - published.params == mtp
    assert total.trainable == total.params - 27 * 64  # the aux-free routers' score corrections are not trained


def test_ernie_45_03b_dense_wider_attention_than_hidden():
    """baidu/ERNIE-4.5-0.3B: 0.36B parameters (its model card); 16 heads of 128 (2048 wide over a 1024 hidden size),
    fused q/k/v, tied embeddings."""
    arch, total = counted("ernie-4.5-0.3b")
    assert (arch.fused, arch.tied, arch.heads * arch.head_dim) == (True, True, 2048)
    assert total.params == 360_748_032 and round(total.params / 1e9, 2) == 0.36


def test_deepseek_v2_lite_latent_attention_and_first_dense_layer():
    """deepseek-ai/DeepSeek-V2-Lite: 15.7B in all, 2.4B activated (its model card: the input embedding's lookup
    is not counted as activated, the head is)."""
    arch, total = counted("deepseek-v2-lite")
    assert arch.moe_layers == frozenset(range(1, 27)) and arch.mla["q_lora_rank"] == 0
    assert total.params == 15_706_484_224
    assert 2.4e9 <= total.active - total.embeddings < 2.5e9  # 2.45B; without the head too, 2.24B
    # PaddleFormers' DeepSeek patterns (".*mlp.gate_proj.*", ...) match the dense layer's MLP, not the experts
    lora = count(arch, lora_rank=8)
    assert lora.lora_targets == 27 * 4 + 3


def test_deepseek_v3_latent_attention_with_query_compression_and_aux_free_routers():
    """deepseek-ai/DeepSeek-V3: 671B in all, 37B activated (its model card; the multi-token-prediction module's
    14B apart, which this count leaves out for DeepSeek: PaddleFormers' deepseek_v3 needs paddlefleet)."""
    arch, total = counted("deepseek-v3")
    assert arch.mla["q_lora_rank"] == 1536 and arch.moe.router_bias and arch.mtp_layers == 0
    assert total.params == 671_026_419_200 and round(total.params / 1e9) == 671
    assert round(total.active / 1e9, 1) == 37.6  # "37B"
    assert total.trainable == total.params - 58 * 256  # the score corrections are not trained


@pytest.mark.parametrize("config, message", [
    ({"hidden_size": 8}, "model_type: is required (which architecture the sizes describe)"),
    ({"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
      "vocab_size": 30522}, "model_type: 'bert' is not counted here (its layers are not laid out as for a decoder "
                            "this count knows: deepseek_v2, deepseek_v3, ernie4_5, ernie4_5_moe, llama, qwen2, "
                            "qwen2_moe, qwen3, qwen3_moe)"),
    ({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": "2", "vocab_size": 9},
     "num_hidden_layers: a positive integer is required, got '2'"),
    ({"model_type": "qwen3_moe", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 2, "vocab_size": 9,
      "num_experts": 4}, "moe_intermediate_size: a positive integer is required, got None"),
])
def test_a_config_it_cannot_count_is_named(config, message):
    with pytest.raises(ArchitectureError) as error:
        architecture(config)
    assert str(error.value) == message


def test_a_missing_or_broken_config_json_is_named(tmp_path):
    with pytest.raises(ArchitectureError, match=r"no such file \(a model folder needs its config.json\)"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ArchitectureError, match="not JSON: "):
        read_config(tmp_path)
