"""`vramtune estimate` of vision-language fine-tuning (no Paddle, nothing probed): a PaddleFormers VL-SFT / VL-DPO
config or a VL model folder, answered from config.json with image tokens at the template's cap; the dialect's VL
stages validated but refused for probing; what does not reach the VL workflow said. Exact output and exit codes."""
from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import SPECS
from fakes import FakeDevice

CONFIGS = SPECS / "configs"


VL_SFT = """# PaddleFormers VL-SFT of PaddleOCR-VL, shaped like ERNIEKit's run_ocr_vl_sft_16k.yaml
stage: VL-SFT
model_name_or_path: ./PaddleOCR-VL
train_dataset_type: messages
train_dataset_path: ./ocr_vl_sft-train.jsonl
template: paddleocr_vl
max_seq_len: 16384
packing: true
fine_tuning: Full
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
compute_type: bf16
max_pixels: 1000000
"""
UNREACHED = ("max_pixels: 1000000 does not reach PaddleFormers 1.2's VL-SFT workflow (its parser reads it, the "
             "workflow never gets it): images are resized to the template's own cap")
EXPECTED = """estimating PaddleOCR-VL (paddleocr_vl, 18 layers): 943,350,384 parameters counted from config.json, LoRA r=8 trains 7,489,280; seq 16384, 8 samples per step and device, flashmask attention; nothing built, no probe
predicted per-rank peaks within 76.0 GiB
┏━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┓
┃ fine-tuning ┃ precision ┃ recompute ┃ stage ┃ largest fitting ┃ its peak ┃ next up ┃  its peak ┃
┡━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━┩
│ LoRA        │ fp32      │         - │     0 │            none │        - │     m=1 │ 236.7 GiB │
│ LoRA        │ fp32      │     17/18 │     0 │             m=2 │ 67.3 GiB │     m=4 │ 130.7 GiB │
│ LoRA        │ bf16      │         - │     0 │            none │        - │     m=1 │ 133.6 GiB │
│ LoRA        │ bf16      │     17/18 │     0 │             m=4 │ 75.3 GiB │     m=8 │ 145.0 GiB │
│ LoRA        │ bf16-o2   │         - │     0 │            none │        - │     m=1 │ 118.4 GiB │
│ LoRA        │ bf16-o2   │     17/18 │     0 │             m=4 │ 65.4 GiB │     m=8 │ 128.8 GiB │
│ full        │ fp32      │         - │     0 │            none │        - │     m=1 │ 248.0 GiB │
│ full        │ fp32      │     18/18 │     0 │             m=2 │ 75.9 GiB │     m=4 │ 136.6 GiB │
│ full        │ bf16      │         - │     0 │            none │        - │     m=1 │ 144.8 GiB │
│ full        │ bf16      │     18/18 │     0 │             m=2 │ 50.2 GiB │     m=4 │  83.6 GiB │
│ full        │ bf16-o2   │         - │     0 │            none │        - │     m=1 │ 133.5 GiB │
│ full        │ bf16-o2   │     18/18 │     0 │             m=2 │ 47.4 GiB │     m=4 │  77.8 GiB │
└─────────────┴───────────┴───────────┴───────┴─────────────────┴──────────┴─────────┴───────────┘
note: sequence length 16384: max_seq_len (packing fills every row to it)
note: max_pixels: 1000000 does not reach PaddleFormers 1.2's VL-SFT workflow (its parser reads it, the workflow never gets it): images are resized to the template's own cap
note: counted (exact, from config.json as PaddleFormers builds the model): every parameter; LoRA r=8 on PaddleFormers' target modules; bytes per parameter of each precision (O2: fp32 master weights and AdamW moments, fp32 gradients with amp_master_grad)
note: measured (CPU, fp32, PaddleFormers' Llama and ERNIE-4.5): the activation coefficients per token, layer and width, and of the logits
note: assumed (stated): AMP O1 activations x0.55 of fp32's, O2 x0.5, the GPU allocator's reserve +8%, flashmask attention keeps no [s, s] tensor
note: paddleocr_vl: the coefficients of PaddleFormers' Llama (separate projections) are assumed
note: vision-language (paddleocr_vl): counted by part: vision tower 450,735,984 (27 layers, width 1152), aligner 25,960,192, language model 466,654,208; LoRA r=8 on PaddleFormers' paddleocr_vl targets trains vision 4,347,648, aligner 118,784, llm 3,022,848
note: assumed: every image at the resolution cap, 2,822,400 pixels (PaddleFormers 1.2's VL template's own cap (datasets/template/mm_plugin.py)): 3,600 tokens (14,400 patches of 14x14, merged 2x2) per image; 4 image(s) per row (packing fills the row): 14,400 of the row's 16,384 tokens are an image's, 57,600 patches in the tower; random augmentation scales are clamped back to the cap by the processor
note: assumed: the vision tower at linear-memory (flash) attention as a GPU runs it (no [patches, patches] scores), its activations per patch with PaddleFormers' Llama coefficients at the tower's width; kept only where a gradient flows into the tower
note: estimated from config.json, not probed: vramtune measure and probe measure PaddleOCR-VL's VL-SFT on its training data's worst row (the other VL models and stages are refused in this version)
predicted best, LoRA: bf16-o2, micro-batch 4 x accumulation 2, recompute 17/18 blocks; peak 65.4 GiB of 76.0 GiB
  what fills it: weights 1.8 GiB, gradients 28.6 MiB, optimizer state 85.7 MiB, activations 58.7 GiB, allocator reserve 4.8 GiB
  in the PaddleFormers config: fine_tuning: LoRA, per_device_train_batch_size: 4, gradient_accumulation_steps: 2, compute_type: bf16, fp16_opt_level: O2, recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1
predicted best, full (asked): bf16-o2, micro-batch 2 x accumulation 4, recompute 18/18 blocks; peak 47.4 GiB of 76.0 GiB
  what fills it: weights 1.8 GiB, gradients 3.5 GiB, optimizer state 10.5 GiB, activations 28.1 GiB, allocator reserve 3.5 GiB
  in the PaddleFormers config: fine_tuning: Full, per_device_train_batch_size: 2, gradient_accumulation_steps: 4, compute_type: bf16, fp16_opt_level: O2, recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1
(the best by preference: AMP O2, then O1, then fp32; the fewest layers recomputed; the largest micro-batch; the lowest sharding stage. Speed is not estimated)
"""


@pytest.fixture
def ocr_vl(tmp_path):
    (tmp_path / "PaddleOCR-VL").mkdir()
    shutil.copy(CONFIGS / "paddleocr-vl.json", tmp_path / "PaddleOCR-VL" / "config.json")
    (tmp_path / "vl_sft.yaml").write_text(VL_SFT)
    return tmp_path


def test_a_vl_sft_config_is_estimated_from_the_model_folders_config_json(fake_cli, ocr_vl):
    cli, backend = fake_cli(FakeDevice())
    code, out, err = cli("estimate", ocr_vl / "vl_sft.yaml", "--card", "80GiB")
    assert (code, out, backend.jobs) == (0, "", [])
    *lines, last = err.splitlines()
    assert "\n".join(lines) + "\n" == EXPECTED
    assert re.fullmatch(r"answered in \d+\.\d\ds", last)


def test_the_folders_preprocessor_config_sets_the_cap_and_the_json_says_the_parts(fake_cli, ocr_vl):
    cli, _ = fake_cli(FakeDevice())
    (ocr_vl / "PaddleOCR-VL" / "preprocessor_config.json").write_text(json.dumps({"max_pixels": 1003520}))
    config = ocr_vl / "lora.yaml"
    config.write_text(VL_SFT.replace("fine_tuning: Full", "fine_tuning: LoRA\nfreeze_config: freeze_vision"))
    code, out, err = cli("estimate", config, "--card", "24GiB", "--json")
    assert code == 0, err
    vision = json.loads(out)["vision"]
    assert vision == {"model_type": "paddleocr_vl", "max_pixels": 1003520, "images_per_row": 12,
                      "image_tokens": 15360, "patches": 61440, "freeze_config": "freeze_vision",
                      "parts": {"vision": {"params": 450_735_984, "full_trainable": 0, "lora_trainable": 1_492_992},
                                "aligner": {"params": 25_960_192, "full_trainable": 25_960_192,
                                            "lora_trainable": 118_784},
                                "llm": {"params": 466_654_208, "full_trainable": 466_654_208,
                                        "lora_trainable": 3_022_848}},
                      "lora_caught_in_vision": 81}
    assert ("1,280 tokens (5,120 patches of 14x14, merged 2x2) per image" in err
            and "(the model folder's preprocessor_config.json)" in err)
    assert ("note: freeze_config 'freeze_vision' under LoRA: PaddleFormers drops the vision patterns, but its "
            "language-model patterns still match 81 vision-tower layers (e.g. "
            "visual.vision_model.encoder.layers.0.self_attn.q_proj): LoRA trains them anyway (counted)\n") in err


def test_a_model_folder_is_estimated_with_one_image_at_the_cap(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice())
    shutil.copy(CONFIGS / "qwen2.5-vl-7b.json", tmp_path / "config.json")
    code, out, err = cli("estimate", tmp_path, "--card", "80GiB", "--json", "--seq-len", "2048", "--batch", "4")
    assert code == 0, err
    report = json.loads(out)
    assert report["full"]["counts"]["params"] == 8_292_166_656 and report["model_type"] == "qwen2_5_vl"
    assert (report["vision"]["images_per_row"], report["vision"]["image_tokens"]) == (1, 752)



def test_several_devices_answer_a_vl_model_with_data_parallel_and_sharding_only(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice())
    shutil.copy(CONFIGS / "qwen2.5-vl-7b.json", tmp_path / "config.json")
    code, out, err = cli("estimate", tmp_path, "--card", "80GiB", "--json", "--devices", "8")
    assert code == 0, err
    report = json.loads(out)
    assert report["layouts"] is None and report["devices"] == 8
    assert ("vision-language: data parallel and sharding only (tensor, pipeline and expert parallel layouts are "
            "estimated for text decoders in this version)") in report["notes"]

def test_validate_takes_a_vl_stage_and_says_what_does_not_reach_its_workflow(fake_cli, ocr_vl):
    cli, _ = fake_cli(FakeDevice())
    code, out, err = cli("validate", ocr_vl / "vl_sft.yaml")
    assert (code, out) == (0, "")
    assert err == f"warning: {UNREACHED}\nok: {ocr_vl / 'vl_sft.yaml'}\n"


@pytest.mark.parametrize("command", [["probe", "--budget", "20GiB"], ["apply", "--budget", "20GiB"],
                                     ["measure", "-m", "1"], ["check", "--budget", "20GiB"]])
def test_probing_a_vl_stage_is_refused_for_estimate(fake_cli, ocr_vl, command):
    cli, backend = fake_cli(FakeDevice())
    config = ocr_vl / "vl_sft.yaml"
    code, out, err = cli(command[0], config, *command[1:])
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == (f"error: {config}: stage: VL-SFT is measured on the training data's worst row (its images "
                   "through the template and the processor): train_dataset_path must name data that is there: "
                   f"vramtune estimate {config} --card SIZE estimates it from the model's config.json (vision tower, "
                   "aligner, language model, image tokens at the resolution cap)\n")


def test_vl_dpo_shares_the_estimate_and_says_what_it_leaves_out(fake_cli, ocr_vl):
    cli, _ = fake_cli(FakeDevice())
    config = ocr_vl / "dpo.yaml"
    config.write_text(VL_SFT.replace("stage: VL-SFT", "stage: VL-DPO"))
    code, _, err = cli("estimate", config, "--card", "80GiB")
    assert code == 0 and ("note: VL-DPO: estimated as VL-SFT of the chosen row (DPO's reference model and the "
                          "rejected row are not modelled)\n") in err


def test_an_unknown_stage_still_names_the_ones_read(fake_cli, ocr_vl):
    cli, _ = fake_cli(FakeDevice())
    config = ocr_vl / "bad.yaml"
    config.write_text(VL_SFT.replace("stage: VL-SFT", "stage: VL-PT"))
    code, _, err = cli("validate", config)
    assert (code, err) == (2, f"error: {config}: stage: must be one of SFT, PT, DPO, VL-SFT, VL-DPO; got 'VL-PT' "
                              "(did you mean 'VL-SFT'?)\n")


def test_a_vl_config_missing_a_tower_size_is_named_with_exit_2(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice())
    config = json.loads((CONFIGS / "qwen2.5-vl-7b.json").read_text())
    del config["vision_config"]["depth"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, err = cli("estimate", tmp_path, "--card", "24GiB")
    assert (code, out, err) == (2, "", f"error: {tmp_path / 'config.json'}: vision_config.depth: a positive integer "
                                      "is required, got None\n")
