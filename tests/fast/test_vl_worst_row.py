"""The VL-SFT probe's worst row, Paddle-free: PaddleOCR-VL's template and processor resizes (smart_resize, the
template's clamp, augmentation's worst case), the choice of row, what the probe says of it, and what is refused or
wrong with a VL file: exact text and exit codes (the data pass itself, a child running PaddleFormers, is faked)."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import SPECS
from fakes import FakeDevice

from vramtune.dialects.paddleformers import images, reading

CONFIGS = SPECS / "configs"
VL_SFT = """stage: VL-SFT
model_name_or_path: ./PaddleOCR-VL
train_dataset_type: messages
train_dataset_path: ./vl.jsonl
template: paddleocr_vl
max_seq_len: 1024
fine_tuning: Full
per_device_train_batch_size: 1
compute_type: float32
device: cpu
"""
ROW = {"row": 2, "tokens": 1250, "patches": 4800, "kept": 3, "augmentation": True,
       "images": [{"name": "wide.png", "width": 896, "height": 448, "resized": [700, 1344]}]}


@pytest.mark.parametrize(("width", "height", "worst", "plain"), [
    (448, 448, (700, 672), (448, 448)),  # scaled 1.5 to 672, padded 15 px: 687 rounds to 700
    (896, 448, (700, 1344), (448, 896)),
    (640, 640, (980, 952), (644, 644)),  # the largest image in area, fewer patches than the wide one at its worst
    (4000, 3000, (1428, 1932), (1428, 1932)),  # above the clamp: augmentation's scale is clamped back to it
    (200, 100, (448, 840), (280, 560)),  # below min_pixels: raised to it, then augmentation scales it up
])
def test_the_size_the_template_hands_the_model(width, height, worst, plain):
    assert images.worst_size(height, width) == worst
    assert images.worst_size(height, width, augmentation=False) == plain
    assert images.worst_size(height, width)[0] * images.worst_size(height, width)[1] <= images.MAX_PIXELS


def test_the_worst_row_has_the_most_tokens_then_the_most_patches_the_first_on_ties():
    rows = [{"row": 1, "tokens": 600, "patches": 2400}, {"row": 2, "tokens": 1250, "patches": 4800},
            {"row": 3, "tokens": 1250, "patches": 4760}, {"row": 4, "tokens": 1250, "patches": 4800},
            {"row": 5, "tokens": 1300, "patches": 100}]
    assert images.worst_row(rows[:4])["row"] == 2
    assert images.worst_row(rows)["row"] == 5  # a long text row beats a larger image with fewer tokens
    assert images.worst_row([]) is None


def test_the_row_measured_is_said_with_its_resolution_patches_and_tokens():
    assert images.describe(ROW, 1024) == (
        "sequence length 1250: the worst of the 3 training rows kept (max_seq_len 1024): row 2 (wide.png 896x448 -> "
        "1344x700), 4800 patches, 1250 tokens; augmentation at its worst: every image scaled by 1.5 and padded 15 px "
        "on one side (PaddleOCR-VL's template scales by 0.5-1.5 and pads 0-15 px at random), then clamped by the "
        "processor")


@pytest.fixture
def vl_folder(tmp_path, monkeypatch):
    (tmp_path / "PaddleOCR-VL").mkdir()
    shutil.copy(CONFIGS / "paddleocr-vl.json", tmp_path / "PaddleOCR-VL" / "config.json")
    (tmp_path / "vl.jsonl").write_text(json.dumps({"messages": [], "images": []}) + "\n")
    (tmp_path / "vl_sft.yaml").write_text(VL_SFT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_dataset_whose_every_row_is_deleted_is_an_error_not_a_hang(fake_cli, vl_folder, monkeypatch):
    monkeypatch.setattr(reading, "longest_sample", lambda *_: {"longest": 0, "kept": 0, "sample": "",
                                                              "vl": {"kept": 0}})
    cli, backend = fake_cli(FakeDevice())
    config = vl_folder / "vl_sft.yaml"
    code, out, err = cli("measure", config, "--device", "cpu")
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == (f"error: {config}: train_dataset_path: every row is longer than max_seq_len 1024 (its text and "
                   "image tokens after the template's and processor's resizes, augmentation at its worst where the "
                   "template augments): PaddleFormers deletes every row (\"[SKIP] data is deleted by truncation "
                   "strategy\") and its workflow never ends: raise max_seq_len or lower the images' resolution\n")


def test_the_worst_row_becomes_the_measured_length_and_is_said(fake_cli, vl_folder, monkeypatch):
    monkeypatch.setattr(reading, "longest_sample", lambda *_: {"longest": 1250, "kept": 3, "sample": "", "vl": ROW})
    raw, _ = reading.formers_spec(vl_folder / "vl_sft.yaml")
    assert raw["data"] == {"seq_len": 1250, "seq_note": images.describe(ROW, 1024)}


@pytest.mark.parametrize(("change", "why"), [
    ({"stage: VL-SFT": "stage: VL-DPO"}, "probing VL-DPO is not supported yet (VL-SFT of PaddleOCR-VL is)"),
    ({"fine_tuning: Full": "fine_tuning: Full\npacking: true"},
     "probing VL-SFT with packing or padding_free is not supported yet (a packed row's images are not read)"),
    ({"PaddleOCR-VL": "Qwen2.5-VL"}, "probing VL-SFT of qwen2_5_vl is not supported yet (PaddleOCR-VL's is: "
                                     "Qwen2.5-VL's template and the others are not measured here)"),
])
def test_what_a_vl_probe_does_not_measure_is_refused_by_name(fake_cli, vl_folder, monkeypatch, change, why):
    monkeypatch.setattr(reading, "longest_sample", lambda *_: {"longest": 1250, "kept": 3, "sample": "", "vl": ROW})
    (vl_folder / "Qwen2.5-VL").mkdir()
    shutil.copy(CONFIGS / "qwen2.5-vl-7b.json", vl_folder / "Qwen2.5-VL" / "config.json")
    config = vl_folder / "vl_sft.yaml"
    text = VL_SFT
    for old, new in change.items():
        text = text.replace(old, new)
    config.write_text(text)
    cli, backend = fake_cli(FakeDevice())
    code, out, err = cli("measure", config, "--device", "cpu")
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == (f"error: {config}: stage: {why}: vramtune estimate {config} --card SIZE estimates it from the "
                   "model's config.json (vision tower, aligner, language model, image tokens at the resolution cap)\n")


def test_a_model_whose_module_needs_triton_says_to_install_it():
    """PaddleOCR-VL's module decorates its kernels with @triton.jit at import: without the package the build raises
    NameError, said with what to do (a CPU never calls the kernels)."""
    from vramtune.dialects.paddleformers.model import architecture_error

    said = str(architecture_error("./PaddleOCR-VL", NameError("name 'triton' is not defined")))
    assert said == ("model_name_or_path: ./PaddleOCR-VL: PaddleFormers cannot build it: NameError: name 'triton' is not "
                    "defined: its module imports the triton package (its GPU kernels, never called on a CPU): pip "
                    "install triton")
