"""`vramtune estimate` given a model rather than a spec (no Paddle, nothing probed): a PaddleFormers config naming a
local model folder, the folder itself, or its config.json. The exact output, the JSON, and bad input (exit 2)."""
from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import SPECS
from fakes import FakeDevice

CONFIGS = SPECS / "configs"
SFT_LORA = """# PaddleFormers examples/config/sft/lora.yaml, for Qwen3-8B
train_dataset_type: erniekit
train_dataset_path: ./data/sft/train.json
max_seq_len: 4096
packing: true
model_name_or_path: ./Qwen3-8B
fine_tuning: LoRA
lora_rank: 8
stage: SFT
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
compute_type: bf16
"""
EXPECTED = """estimating Qwen3-8B (qwen3, 36 layers): 8,190,735,360 parameters counted from config.json, LoRA r=8 trains 18,284,544; seq 4096, 8 samples per step and device, flashmask attention; nothing built, no probe
predicted per-rank peaks within 22.8 GiB
┏━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┓
┃ fine-tuning ┃ precision ┃ recompute ┃ stage ┃ largest fitting ┃ its peak ┃ next up ┃  its peak ┃
┡━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━┩
│ LoRA        │ fp32      │         - │     0 │            none │        - │     m=1 │  85.3 GiB │
│ LoRA        │ fp32      │      9/36 │     0 │            none │        - │     m=1 │  74.8 GiB │
│ LoRA        │ fp32      │     18/36 │     0 │            none │        - │     m=1 │  64.2 GiB │
│ LoRA        │ fp32      │     27/36 │     0 │            none │        - │     m=1 │  53.7 GiB │
│ LoRA        │ fp32      │     36/36 │     0 │            none │        - │     m=1 │  43.2 GiB │
│ LoRA        │ bf16      │         - │     0 │            none │        - │     m=1 │  77.1 GiB │
│ LoRA        │ bf16      │      9/36 │     0 │            none │        - │     m=1 │  71.3 GiB │
│ LoRA        │ bf16      │     18/36 │     0 │            none │        - │     m=1 │  65.5 GiB │
│ LoRA        │ bf16      │     27/36 │     0 │            none │        - │     m=1 │  59.7 GiB │
│ LoRA        │ bf16      │     36/36 │     0 │            none │        - │     m=1 │  53.9 GiB │
│ LoRA        │ bf16-o2   │         - │     0 │            none │        - │     m=1 │  42.8 GiB │
│ LoRA        │ bf16-o2   │      9/36 │     0 │            none │        - │     m=1 │  37.6 GiB │
│ LoRA        │ bf16-o2   │     18/36 │     0 │            none │        - │     m=1 │  32.3 GiB │
│ LoRA        │ bf16-o2   │     27/36 │     0 │            none │        - │     m=1 │  27.0 GiB │
│ LoRA        │ bf16-o2   │     36/36 │     0 │             m=1 │ 21.8 GiB │     m=2 │  26.7 GiB │
│ full        │ fp32      │         - │     0 │            none │        - │     m=1 │ 183.9 GiB │
│ full        │ fp32      │      9/36 │     0 │            none │        - │     m=1 │ 173.3 GiB │
│ full        │ fp32      │     18/36 │     0 │            none │        - │     m=1 │ 162.8 GiB │
│ full        │ fp32      │     27/36 │     0 │            none │        - │     m=1 │ 152.3 GiB │
│ full        │ fp32      │     36/36 │     0 │            none │        - │     m=1 │ 141.8 GiB │
│ full        │ bf16      │         - │     0 │            none │        - │     m=1 │ 175.7 GiB │
│ full        │ bf16      │      9/36 │     0 │            none │        - │     m=1 │ 169.9 GiB │
│ full        │ bf16      │     18/36 │     0 │            none │        - │     m=1 │ 164.1 GiB │
│ full        │ bf16      │     27/36 │     0 │            none │        - │     m=1 │ 158.3 GiB │
│ full        │ bf16      │     36/36 │     0 │            none │        - │     m=1 │ 152.5 GiB │
│ full        │ bf16-o2   │         - │     0 │            none │        - │     m=1 │ 174.3 GiB │
│ full        │ bf16-o2   │      9/36 │     0 │            none │        - │     m=1 │ 169.1 GiB │
│ full        │ bf16-o2   │     18/36 │     0 │            none │        - │     m=1 │ 163.8 GiB │
│ full        │ bf16-o2   │     27/36 │     0 │            none │        - │     m=1 │ 158.5 GiB │
│ full        │ bf16-o2   │     36/36 │     0 │            none │        - │     m=1 │ 153.3 GiB │
└─────────────┴───────────┴───────────┴───────┴─────────────────┴──────────┴─────────┴───────────┘
note: sequence length 4096: max_seq_len (packing fills every row to it)
note: counted (exact, from config.json as PaddleFormers builds the model): every parameter; LoRA r=8 on PaddleFormers' target modules; bytes per parameter of each precision (O2: fp32 master weights and AdamW moments, fp32 gradients with amp_master_grad)
note: measured (CPU, fp32, PaddleFormers' Llama and ERNIE-4.5): the activation coefficients per token, layer and width, and of the logits
note: assumed (stated): AMP O1 activations x0.55 of fp32's, O2 x0.5, the GPU allocator's reserve +8%, flashmask attention keeps no [s, s] tensor
note: qwen3: the coefficients of PaddleFormers' ERNIE-4.5 (fused projections) are assumed (its code needs paddlefleet, not on PyPI: it cannot be built here)
predicted best, LoRA (asked): bf16-o2, micro-batch 1 x accumulation 8, recompute 36/36 blocks; peak 21.8 GiB of 22.8 GiB
  what fills it: weights 15.3 GiB, gradients 69.8 MiB, optimizer state 209.2 MiB, activations 4.6 GiB, allocator reserve 1.6 GiB
  in the PaddleFormers config: fine_tuning: LoRA, per_device_train_batch_size: 1, gradient_accumulation_steps: 8, compute_type: bf16, fp16_opt_level: O2, recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1
predicted best, full: nothing is predicted to fit 22.8 GiB
(the best by preference: AMP O2, then O1, then fp32; the fewest layers recomputed; the largest micro-batch; the lowest sharding stage. Speed is not estimated)
"""


@pytest.fixture
def qwen3_8b(tmp_path):
    (tmp_path / "Qwen3-8B").mkdir()
    shutil.copy(CONFIGS / "qwen3-8b.json", tmp_path / "Qwen3-8B" / "config.json")
    (tmp_path / "sft_lora.yaml").write_text(SFT_LORA)
    return tmp_path


def test_a_paddleformers_config_is_answered_from_the_model_folders_config_json(fake_cli, qwen3_8b):
    cli, backend = fake_cli(FakeDevice())
    code, out, err = cli("estimate", qwen3_8b / "sft_lora.yaml", "--card", "24GiB")
    assert (code, out, backend.jobs) == (0, "", [])  # nothing probed
    *lines, last = err.splitlines()
    assert "\n".join(lines) + "\n" == EXPECTED
    assert re.fullmatch(r"answered in \d+\.\d\ds", last)


def test_the_json_answer_of_a_model_folder_and_its_config_json_alone(fake_cli, qwen3_8b):
    cli, _ = fake_cli(FakeDevice())
    code, out, err = cli("estimate", qwen3_8b / "Qwen3-8B", "--card", "80GiB", "--json", "--devices", "8",
                         "--seq-len", "2048", "--batch", "4")
    assert code == 0, err
    report = json.loads(out)
    assert (report["seq_len"], report["batch"], report["devices"], report["asked"]) == (2048, 4, 8, None)
    assert report["full"]["counts"]["params"] == 8_190_735_360 == report["active_params"]
    best = report["full"]["best"]  # full fine-tuning fits 8 ranks once sharding partitions the state
    assert best["precision"] == "bf16-o2" and best["sharding_stage"] >= 1 and best["reserved_bytes"] <= 0.95 * 80 * 2**30
    assert best["optimizer_state"] == 12 * 8_190_735_360 // 8  # AdamW moments and fp32 master weights over 8 ranks
    assert best["keys"] == {"fine_tuning": "Full", "per_device_train_batch_size": best["micro_batch"],
                            "gradient_accumulation_steps": 4 // best["micro_batch"], "compute_type": "bf16",
                            "fp16_opt_level": "O2", "sharding": f"stage{best['sharding_stage']}",
                            "sharding_parallel_size": 8,
                            **({"recompute_granularity": "full", "recompute_method": "block",
                                "recompute_num_layers": best["recomputed_blocks"]}
                               if 0 < best["recomputed_blocks"] < 36 else {})}
    code, again, _ = cli("estimate", qwen3_8b / "Qwen3-8B" / "config.json", "--card", "80GiB", "--json", "--devices",
                         "8", "--seq-len", "2048", "--batch", "4")
    assert code == 0 and json.loads(again)["full"]["best"] == best


def test_nothing_fitting_the_asked_fine_tuning_exits_1(fake_cli, qwen3_8b):
    cli, _ = fake_cli(FakeDevice())
    config = qwen3_8b / "full.yaml"
    config.write_text(SFT_LORA.replace("fine_tuning: LoRA", "fine_tuning: Full"))
    code, _, err = cli("estimate", config, "--card", "24GiB")
    assert code == 1 and "predicted best, full (asked): nothing is predicted to fit 22.8 GiB" in err


@pytest.mark.parametrize("change, message", [  # read by the PaddleFormers dialect, as `vramtune probe` reads it
    (("model_name_or_path: ./Qwen3-8B", "model_name_or_path: Qwen/Qwen3-8B"),
     "model_name_or_path: 'Qwen/Qwen3-8B': no such local model folder (vramtune never downloads)"),
    (("lora_rank: 8", "lorarank: 8"), "lorarank: PaddleFormers 1.2.0's parser rejects it (\"Some specified arguments "
     "are not used by the PdArgumentParser\") (did you mean 'lora_rank'?)"),
    (("max_seq_len: 4096", "max_seq_len: 0"), "max_seq_len: must be positive, got 0"),
    (("per_device_train_batch_size: 1", "per_device_train_batch_size: true"),
     "per_device_train_batch_size: must be an integer, got a boolean (True)"),
    (("lora_rank: 8", "lora_rank: -8"), "lora_rank: must be a positive integer, got -8"),
])
def test_bad_input_is_named_with_exit_2(fake_cli, qwen3_8b, change, message):
    cli, backend = fake_cli(FakeDevice())
    config = qwen3_8b / "bad.yaml"
    config.write_text(SFT_LORA.replace(*change))
    code, out, err = cli("estimate", config, "--card", "24GiB")
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == f"error: {config}: {message}\n"


def test_what_the_probes_refuse_is_answered_without_it_and_said(fake_cli, qwen3_8b):
    """The dialect refuses tensor parallelism and quantized weights for probes and points to estimate: the estimate
    reads the tensor-parallel degree as the file's layout on as many devices, and answers without the quantized
    weights, saying so."""
    cli, _ = fake_cli(FakeDevice())
    config = qwen3_8b / "tp.yaml"
    config.write_text(SFT_LORA.replace("compute_type: bf16", "compute_type: wint4\ntensor_model_parallel_size: 4"))
    code, _, err = cli("estimate", config, "--card", "24GiB")
    assert code == 0 and "tensor_model_parallel_size" not in err.split("layouts of")[0]
    assert "\nthe file's layout: dp1 tp4, m=1 x 8, no recompute: peak 18.9 GiB per rank (stage 0) of 22.8 GiB: fits\n" in err
    assert "note: compute_type: 'wint4' quantizes the weights: not modelled, the figures are bf16's\n" in err


def test_a_broken_model_config_is_named_with_exit_2(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64}))
    code, _, err = cli("estimate", tmp_path, "--card", "24GiB")
    assert code == 2 and err == (f"error: {tmp_path / 'config.json'}: num_attention_heads: a positive integer is "
                                 "required, got None\n")
    (tmp_path / "config.json").write_text("{")
    code, _, err = cli("estimate", tmp_path, "--card", "24GiB")
    assert code == 2 and err.startswith(f"error: {tmp_path / 'config.json'}: not JSON: ")
    code, out, err = cli("estimate", SPECS / "tiny-bert", "--card", "24GiB")
    assert (code, out) == (2, "") and err == (f"error: {SPECS / 'tiny-bert' / 'config.json'}: model_type: 'bert' is not "
                                              "counted here (its layers are not laid out as for a decoder this count "
                                              "knows: deepseek_v2, deepseek_v3, ernie4_5, ernie4_5_moe, llama, qwen2, "
                                              "qwen2_moe, qwen3, qwen3_moe)\n")


def test_recompute_levels_are_those_the_models_code_honours(fake_cli, tmp_path):
    """PaddleFormers' own ERNIE-4.5 code recomputes every layer or none, and a layer only when its input needs a
    gradient: under LoRA not the first (the embeddings are frozen). The paddlefleet models (Qwen3) take Megatron's
    block method, the first N layers (the rows in quarters)."""
    cli, _ = fake_cli(FakeDevice())
    levels = {}
    for name in ("ernie-4.5-21b-a3b", "qwen3-8b"):
        (tmp_path / name).mkdir()
        shutil.copy(CONFIGS / f"{name}.json", tmp_path / name / "config.json")
        code, out, err = cli("estimate", tmp_path / name, "--card", "80GiB", "--json")
        assert code == 0, err
        report = json.loads(out)
        levels[name] = [sorted({r["recomputed_blocks"] for r in report[f]["rows"]}) for f in ("LoRA", "full")]
    assert levels == {"ernie-4.5-21b-a3b": [[0, 27], [0, 28]], "qwen3-8b": [[0, 9, 18, 27, 36]] * 2}


def test_a_gpu_runs_probes_calibrate_the_factors_here_too(fake_cli, qwen3_8b, write_spec):
    """--calibrate: a `probe --json` report from a GPU replaces the stated AMP and allocator factors (here a fake
    GPU's: its allocator reserves 10% beyond the peak)."""
    from conftest import mlp_spec

    gpu = FakeDevice(kind="gpu", name="fake A100", card_bytes=2**30, fixed=32 * 2**20, per_sample=2**18,
                     amp_factor=0.6, o2_factor=0.45, fragmentation=0.1, blocks=6)
    cli, _ = fake_cli(gpu)
    code, out, err = cli("probe", write_spec(mlp_spec(device="gpu", budget="256MiB"), "gpu.yaml"), "--json")
    assert code == 0, err
    (qwen3_8b / "gpu.json").write_text(out)
    code, out, err = cli("estimate", qwen3_8b / "sft_lora.yaml", "--card", "80GiB", "--calibrate",
                         qwen3_8b / "gpu.json", "--json")
    assert code == 0, err
    factors = json.loads(out)["factors"]
    assert factors["source"].startswith("calibrated from ") and factors["fragmentation"] == pytest.approx(0.1, abs=0.01)
    assert "note: assumed (calibrated from " in err


def test_the_strategies_and_the_keys_of_the_predicted_best_come_from_the_mechanisms(fake_cli, qwen3_8b):
    """Every row is one of the combinations of the values each mechanism explores, nested by their places (the
    micro-batch innermost). Recompute writes the block method for Qwen3's paddlefleet code."""
    cli, _ = fake_cli(FakeDevice())
    arguments = ("estimate", qwen3_8b / "Qwen3-8B", "--card", "24GiB", "--devices", "4", "--json")
    code, out, err = cli(*arguments)
    assert code == 0, err
    plain = json.loads(out)["LoRA"]
    assert plain["best"]["keys"] == {
        "fine_tuning": "LoRA", "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8,
        "compute_type": "bf16", "fp16_opt_level": "O2", "recompute_granularity": "full", "recompute_method": "block",
        "recompute_num_layers": 18, "sharding": "stage3", "sharding_parallel_size": 4}
