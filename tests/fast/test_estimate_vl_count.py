"""Vision-language models counted from config.json alone (no Paddle): PaddleOCR-VL, Qwen2.5-VL and ERNIE-4.5-VL as
PaddleFormers 1.2 builds them (vision tower, aligner, language model), LoRA's targets and freeze_config as its
workflow applies them, quirks included, and the image tokens at a resolution cap."""
from __future__ import annotations

import json

import pytest
from conftest import SPECS

from vramtune.memory.architecture import ArchitectureError
from vramtune.memory.vision import count_vl, image_tokens, lora_targets, vision_language

CONFIGS = SPECS / "configs"


def vl(name: str):
    return vision_language(json.loads((CONFIGS / f"{name}.json").read_text()))


@pytest.mark.parametrize("name, params, parts", [
    # PaddleFormers 1.2's own builds of these configs (paddle.LazyGuard), parameter for parameter
    ("paddleocr-vl", 943_350_384, {"vision": 450_735_984, "aligner": 25_960_192, "llm": 466_654_208}),
    ("qwen2.5-vl-7b", 8_292_166_656, {"vision": 631_975_680, "aligner": 44_574_464, "llm": 7_615_616_512}),
    ("ernie-4.5-vl-28b-a3b", 29_399_294_336, {"vision": 630_433_280, "aligner": 144_225_280,
                                              "llm": 28_624_635_776}),
])
def test_every_part_counted_as_paddleformers_builds_it(name, params, parts):
    """PaddleOCR-VL "0.9B", Qwen2.5-VL-7B 8.29B (Hugging Face's count of its weights), ERNIE-4.5-VL-28B-A3B "28B"
    (PaddleFormers builds its text and vision experts, both routers and their score corrections: 29.4B)."""
    counted = count_vl(vl(name))
    assert counted.total.params == params
    assert {part: size for part, (size, _) in counted.parts.items()} == parts
    assert counted.total.trainable == params - (27 * 128 if name.startswith("ernie") else 0)  # routers' corrections


@pytest.mark.parametrize("name, freeze, rank, params, trainable", [
    # each equal to PaddleFormers 1.2's LoRAModel over get_lora_target_modules (filtered by
    # get_multimodel_lora_target_modules) or its freeze_model_parameters, built lazily from the same config
    ("paddleocr-vl", "", 8, 950_839_664, 7_489_280),
    ("paddleocr-vl", "freeze_vision", 8, 947_985_008, 4_634_624),
    ("paddleocr-vl", "freeze_vision freeze_aligner", 8, 947_866_224, 4_515_840),
    ("paddleocr-vl", "freeze_vision", None, 943_350_384, 492_614_400),
    ("paddleocr-vl", "freeze_aligner", None, 943_350_384, 917_390_192),
    ("paddleocr-vl", "freeze_llm", None, 943_350_384, 476_696_176),
    ("qwen2.5-vl-7b", "", 8, 8_315_670_528, 23_503_872),
    ("qwen2.5-vl-7b", "freeze_vision freeze_aligner", 8, 8_315_670_528, 23_503_872),
    ("qwen2.5-vl-7b", "freeze_vision", None, 8_292_166_656, 7_660_190_976),
    ("qwen2.5-vl-7b", "freeze_llm", None, 8_292_166_656, 676_550_144),
    ("ernie-4.5-vl-28b-a3b", "", 8, 29_709_914_496, 310_620_160),
    ("ernie-4.5-vl-28b-a3b", "freeze_vision", 8, 29_704_671_616, 305_377_280),
    ("ernie-4.5-vl-28b-a3b", "freeze_vision", None, 29_399_294_336, 28_768_861_056),
    ("ernie-4.5-vl-28b-a3b", "freeze_aligner", None, 29_399_294_336, 29_399_294_336),
    ("ernie-4.5-vl-28b-a3b", "freeze_llm", None, 29_399_294_336, 630_433_280),
])
def test_lora_and_freeze_config_train_what_paddleformers_trains(name, freeze, rank, params, trainable):
    counted = count_vl(vl(name), rank, freeze).total
    assert (counted.params, counted.trainable) == (params, trainable)


def test_the_quirks_freeze_config_has_in_paddleformers_are_counted():
    """PaddleOCR-VL: the language model's pattern .*model.*q_proj.* also matches the tower's
    visual.vision_model...q_proj, so LoRA keeps 27 x 3 tower layers under freeze_vision. Qwen2.5-VL: no LoRA
    pattern names a part's prefix, so freeze_config drops none of them. ERNIE-4.5-VL: its resampler is named
    model.resampler_model, which the "model" prefix (the language model's) takes first: freeze_aligner leaves it
    trained, freeze_llm freezes it."""
    ocr = count_vl(vl("paddleocr-vl"), 8, "freeze_vision")
    assert len(ocr.caught) == 81 and ocr.caught[0] == "visual.vision_model.encoder.layers.0.self_attn.q_proj"
    assert lora_targets("qwen2_5_vl", "freeze_vision freeze_aligner") == lora_targets("qwen2_5_vl", "")
    ernie = count_vl(vl("ernie-4.5-vl-28b-a3b"), None, "freeze_aligner")
    assert ernie.parts["aligner"] == (144_225_280, 144_225_280)
    assert set(ernie.strays.values()) == {("aligner", "llm")} and len(ernie.strays) == 8


@pytest.mark.parametrize("name, max_pixels, patches, tokens", [
    ("paddleocr-vl", 2_822_400, 14_400, 3_600),  # its image processor's cap: 1680 x 1680
    ("qwen2.5-vl-7b", 768 * 768, 3_008, 752),
    ("ernie-4.5-vl-28b-a3b", 28 * 28 * 1280, 5_120, 1_280),
])
def test_image_tokens_at_the_cap(name, max_pixels, patches, tokens):
    assert image_tokens(vl(name), max_pixels) == (patches, tokens)


def test_a_vl_config_without_its_vision_config_is_named():
    config = json.loads((CONFIGS / "paddleocr-vl.json").read_text())
    del config["vision_config"]
    with pytest.raises(ArchitectureError, match="vision_config: paddleocr_vl needs its vision tower's sizes"):
        vision_language(config)
