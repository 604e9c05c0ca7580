"""LoRA and prefix tuning in the spec (YAML and arguments files), without Paddle."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import CONFIGS, SPECS, mlp_spec

from vramtune.spec import SpecError, load_spec


def nlp_spec(tmp_path, **train) -> dict:
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama", dirs_exist_ok=True)
    return {"model": {"source": "paddlenlp", "config": "./tiny-llama"}, "data": {"seq_len": 64},
            "train": {"target_batch": 8, **train}, "device": "cpu", "budget": "1GiB"}


def test_yaml_lora_and_prefix_settings(tmp_path, write_spec):
    spec = load_spec(write_spec(nlp_spec(tmp_path, lora={"rank": 16, "target_modules": [".*q_proj.*"]})))
    lora = spec.settings["peft"].lora
    assert (lora.rank, lora.target_modules, lora.scale_alpha) == (16, [".*q_proj.*"], 32.0)  # alpha 2 x rank
    assert load_spec(write_spec(nlp_spec(tmp_path, lora=True))).settings["peft"].lora.rank == 8
    prefix = load_spec(write_spec(nlp_spec(tmp_path, prefix_tuning={"tokens": 64}))).settings["peft"]
    assert (prefix.prefix_tokens, prefix.lora) == (64, None)


def test_bad_peft_settings_are_named(tmp_path, write_spec, cli):
    path = write_spec(nlp_spec(tmp_path, lora={"rnak": 4}, prefix_tuning="yes"))
    code, _, err = cli("validate", path)
    assert code == 2 and err.splitlines() == [
        f"error: {path}: train.lora.rnak: unknown key (did you mean 'rank'?)",
        f"error: {path}: train.prefix_tuning: must be true, false or a mapping {{tokens: N}}, got 'yes'"]
    path = write_spec(mlp_spec(**{"train.lora": True}))
    code, _, err = cli("validate", path)
    assert (code, err) == (2, f"error: {path}: train.lora: needs a PaddleNLP model (model.source: paddlenlp): "
                              "PaddleNLP's peft builds it\n")


def test_arguments_file_lora_keys_and_a_saved_adapter_configuration(tmp_path, monkeypatch):
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "lora_config.json").write_text(json.dumps({"r": 4, "target_modules": [".*v_proj.*"],
                                                                       "lora_alpha": 8}))
    monkeypatch.chdir(tmp_path)
    base = {"model_name_or_path": "./tiny-llama", "max_length": 64, "lora": True, "lora_rank": 16, "rslora": True}
    path = tmp_path / "args.json"
    path.write_text(json.dumps(base))
    lora = load_spec(path).settings["peft"].lora
    assert (lora.rank, lora.rslora, lora.scale_alpha) == (16, True, 4.0)  # the script: alpha 4 with rslora
    path.write_text(json.dumps({**base, "lora_path": "./adapter"}))  # its saved configuration wins, as in the script
    lora = load_spec(path).settings["peft"].lora
    assert (lora.rank, lora.target_modules, lora.alpha) == (4, [".*v_proj.*"], 8)
    path.write_text(json.dumps({**base, "lora_path": "./tiny-llama"}))
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert str(error.value) == (f"{path}: lora_path: './tiny-llama': the folder has no lora_config.json (vramtune "
                                "reads only the configuration, never the weights)")
    path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "max_length": 64, "prefix_tuning": True,
                                "num_prefix_tokens": 16}))
    assert load_spec(path).settings["peft"].prefix_tokens == 16
    assert load_spec(CONFIGS / "bert-mini-cpu.yaml").settings["peft"].lora is None  # full fine-tuning by default
