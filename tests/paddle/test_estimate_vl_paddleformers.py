"""The vision-language count against the model PaddleFormers 1.2 builds (lazily: no memory): tiny PaddleOCR-VL,
Qwen2.5-VL and ERNIE-4.5-VL made by PaddleFormers' own classes, with LoRA applied by its own target modules and
freeze_config by its own functions (get_multimodel_lora_target_modules, freeze_model_parameters). Exact equality.
The real configs' counts (tests/fast/test_estimate_vl_count.py) were taken from the same builds at full size."""
from __future__ import annotations

import importlib.util
import math
import sys
import types

import pytest
from conftest import needs_paddleformers

from vramtune.memory.vision import count_vl, vision_language

pytestmark = [pytest.mark.paddle, needs_paddleformers]

TEXT = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "rms_norm_eps": 1e-5}
TINY = {
    "paddleocr_vl": {**TEXT, "model_type": "paddleocr_vl", "head_dim": 16, "tie_word_embeddings": False,
                     "vision_config": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                                       "num_attention_heads": 2, "image_size": 56, "patch_size": 14,
                                       "spatial_merge_size": 2, "num_channels": 3, "hidden_act": "gelu_pytorch_tanh",
                                       "layer_norm_eps": 1e-6}},
    "qwen2_5_vl": {**TEXT, "model_type": "qwen2_5_vl", "tie_word_embeddings": False,
                   "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
                   "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
                                     "in_chans": 3, "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                                     "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1],
                                     "hidden_act": "silu"}},
    "ernie4_5_moe_vl": {**TEXT, "model_type": "ernie4_5_moe_vl", "intermediate_size": 128, "num_hidden_layers": 5,
                        "moe_num_experts": [4, 4], "moe_intermediate_size": [32, 16], "moe_k": 2,
                        "moe_layer_start_index": [1, 2], "moe_layer_end_index": [4, 3], "moe_layer_interval": 1,
                        "moe_num_shared_experts": 2, "moe_use_aux_free": True, "moe_capacity": [8, 8, 8],
                        "moe_multimodal_dispatch_use_allgather": "v2-alltoall-unpad-text", "pixel_hidden_size": 32,
                        "spatial_conv_size": 2, "temporal_conv_size": 2, "tie_word_embeddings": True,
                        "use_rmsnorm": True, "rope_3d": True,
                        "vision_config": {"depth": 2, "embed_dim": 32, "hidden_size": 32, "mlp_ratio": 4,
                                          "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2, "in_chans": 3,
                                          "hidden_act": "quick_gelu", "attn_implementation": "eager"}},
}


@pytest.fixture
def importable(monkeypatch):
    """PaddleOCR-VL's module imports PaddleFormers' triton kernels (GPU-only, never called here): where `triton` is
    not installed, a stand-in whose jit returns the function lets the module import."""
    if importlib.util.find_spec("triton") is None:
        triton, language = types.ModuleType("triton"), types.ModuleType("triton.language")
        triton.jit = lambda fn=None, **_: fn if fn else (lambda inner: inner)
        language.constexpr = int
        triton.language = language
        monkeypatch.setitem(sys.modules, "triton", triton)
        monkeypatch.setitem(sys.modules, "triton.language", language)


def built(config: dict, lora_rank: int | None, freeze: str) -> tuple[int, int]:
    import paddle
    from paddleformers.cli.utils.llm_utils import get_lora_target_modules
    from paddleformers.cli.utils.mllm_utils import freeze_model_parameters, get_multimodel_lora_target_modules
    from paddleformers.peft import LoRAConfig, LoRAModel

    if config["model_type"] == "paddleocr_vl":
        from paddleformers.transformers.paddleocr_vl import PaddleOCRVLConfig as Config
        from paddleformers.transformers.paddleocr_vl import PaddleOCRVLForConditionalGeneration as Model
    elif config["model_type"] == "qwen2_5_vl":
        from paddleformers.transformers.qwen2_5_vl import Qwen2_5_VLConfig as Config
        from paddleformers.transformers.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration as Model
    else:
        from paddleformers.transformers.ernie4_5_moe_vl import Ernie4_5_VLConfig as Config
        from paddleformers.transformers.ernie4_5_moe_vl import Ernie4_5_VLMoeForConditionalGeneration as Model
    with paddle.LazyGuard():
        model = Model(Config(**config))
        if lora_rank:  # as the SFT workflow's create_peft_model
            targets = get_lora_target_modules(model)
            targets = get_multimodel_lora_target_modules(model, targets, freeze) if freeze else targets
            model = LoRAModel(model, LoRAConfig(target_modules=targets, r=lora_rank, lora_alpha=2 * lora_rank,
                                                merge_weights=False, dtype="float32"))
        else:  # full fine-tuning with freeze_config
            freeze_model_parameters(model, freeze)
    parameters = list(model.parameters())
    return (sum(math.prod(p.shape) for p in parameters),
            sum(math.prod(p.shape) for p in parameters if not p.stop_gradient))


@pytest.mark.parametrize("model_type", sorted(TINY))
@pytest.mark.parametrize("lora_rank, freeze", [(8, ""), (8, "freeze_vision"), (None, "freeze_vision freeze_aligner"),
                                               (None, "freeze_llm")])
def test_the_vl_count_equals_the_model_paddleformers_builds(importable, model_type, lora_rank, freeze):
    counted = count_vl(vision_language(TINY[model_type]), lora_rank, freeze).total
    assert (counted.params, counted.trainable) == built(TINY[model_type], lora_rank, freeze)
