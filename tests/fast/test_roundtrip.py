"""Writing the user's file back: only the changed values' characters change; anchors, comments, order stay."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from vramtune.dialects.roundtrip import DELETE, RoundTripError, set_keys

OCR = """\
Global:
  use_gpu: true   # train on the GPU
  epoch_num: 75
Train:
  sampler:
    name: MultiScaleSampler
    first_bs: &bs 128
    scales: [[320, 32], [320, 48]]
  loader:
    shuffle: true
    batch_size_per_card: *bs
Eval:
  loader:
    batch_size_per_card: 128  # its own, not the anchor
"""


def test_an_anchored_value_changes_with_its_aliases_and_nothing_else():
    text, followers = set_keys(OCR, {"Train.sampler.first_bs": 16})
    assert text == OCR.replace("&bs 128", "&bs 16")
    assert followers == ["Train.loader.batch_size_per_card"]
    loaded = yaml.safe_load(text)
    assert loaded["Train"]["loader"]["batch_size_per_card"] == 16 and loaded["Eval"]["loader"]["batch_size_per_card"] == 128


def test_a_change_through_an_alias_changes_the_anchor():
    text, followers = set_keys(OCR, {"Train.loader.batch_size_per_card": 8})
    assert text == OCR.replace("&bs 128", "&bs 8")
    assert followers == ["Train.sampler.first_bs"]


def test_flat_yaml_keys_set_added_and_removed_keep_every_other_byte():
    flat = "### data\nmax_seq_len: 8192\nper_device_train_batch_size: 1  # per card\nrecompute_granularity: full\n" \
           "learning_rate: 3.0e-04\n"
    text, _ = set_keys(flat, {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                              "recompute_granularity": DELETE, "learning_rate": 1.0e-5})
    assert text == ("### data\nmax_seq_len: 8192\nper_device_train_batch_size: 4  # per card\n"
                    "learning_rate: 1.0e-05\ngradient_accumulation_steps: 2\n")
    assert yaml.safe_load(text)["learning_rate"] == 1.0e-5


def test_a_key_added_to_a_nested_block_mapping_lands_at_its_indentation():
    text, _ = set_keys(OCR, {"Global.update_freq": 4, "Global.use_amp": True, "Train.sampler.scales.1": [160, 48]})
    loaded = yaml.safe_load(text)
    assert loaded["Global"] == {"use_gpu": True, "epoch_num": 75, "update_freq": 4, "use_amp": True}
    assert loaded["Train"]["sampler"]["scales"] == [[320, 32], [160, 48]]
    assert "  epoch_num: 75\n  update_freq: 4\n  use_amp: true\nTrain:" in text
    assert "use_gpu: true   # train on the GPU" in text


def test_json_edits_keep_order_and_layout():
    arguments = {"model_name_or_path": "./tiny", "per_device_train_batch_size": 8, "recompute": True, "bf16": True}
    original = json.dumps(arguments, indent=4) + "\n"
    text, _ = set_keys(original, {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                                  "recompute": DELETE, "stage": "SFT"}, "json")
    assert json.loads(text) == {"model_name_or_path": "./tiny", "per_device_train_batch_size": 2, "bf16": True,
                                "gradient_accumulation_steps": 4, "stage": "SFT"}
    assert text == json.dumps(json.loads(text), indent=4) + "\n"
    last, _ = set_keys(text, {"stage": DELETE}, "json")
    assert json.loads(last) == {"model_name_or_path": "./tiny", "per_device_train_batch_size": 2, "bf16": True,
                                "gradient_accumulation_steps": 4}


def test_a_tab_indented_json_file_is_edited_with_its_tabs_and_order():
    original = '{\n\t"stage": "SFT",\n\t"per_device_train_batch_size": 8,\n\t"recompute": true,\n\t"bf16": true\n}\n'
    text, followers = set_keys(original, {"per_device_train_batch_size": 2, "recompute": DELETE,
                                          "gradient_accumulation_steps": 4}, "json")
    assert (text, followers) == ('{\n\t"stage": "SFT",\n\t"per_device_train_batch_size": 2,\n\t"bf16": true,\n'
                                 '\t"gradient_accumulation_steps": 4\n}\n', [])
    with pytest.raises(RoundTripError, match=re.escape("stage.x: stage is not a mapping")):
        set_keys(original, {"stage.x": 1}, "json")


def test_paths_that_do_not_exist_are_refused_with_the_missing_part():
    with pytest.raises(RoundTripError, match=re.escape("Train.nope.x: 'nope' is not in the file")):
        set_keys(OCR, {"Train.nope.x": 1})
    with pytest.raises(RoundTripError, match=re.escape("Global.epoch_num.x: Global.epoch_num is not a mapping")):
        set_keys(OCR, {"Global.epoch_num.x": 1})
