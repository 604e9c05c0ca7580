"""VL-SFT of a tiny random-init PaddleOCR-VL (tests/specs/formers/paddleocr_vl/, made by make_vl.py) with images of
three sizes: `vramtune measure` trains the data's worst row as the workflow builds the model, and PaddleFormers' own
VL-SFT workflow on the same file and data peaks where the probe measured.

The template augments at random (scale 0.5-1.5, padding 0-15 px): the workflow runs here with its augmentation at the
worst case the probe measures (tests/formers/hook/sitecustomize.py, VRAMTUNE_WORST_AUGMENTATION), and the probe with
the CPU's own eager attention in the vision tower (VRAMTUNE_VL_CPU_ATTENTION=eager), as the workflow holds it on a
CPU. The probe's default, a linear-memory attention holding what a GPU's flashmask holds, measures less by the
tower's heads x P x P scores."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from band import UNDER, log_band
from conftest import ROOT, needs_paddleformers
from formers_client import FORMERS, workflow_peak

pytestmark = [pytest.mark.paddle, needs_paddleformers]
# PaddleOCR-VL's module imports PaddleFormers' triton kernels, never called on a CPU (a user runs `pip install
# triton`, ~1 GB installed): where it is not installed, the probe's children and the workflow import tests/stubs/triton
STUBS = [str(ROOT / "tests" / "stubs")] if importlib.util.find_spec("triton") is None else []


@pytest.fixture(autouse=True)
def importable_triton(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [*STUBS, os.environ.get("PYTHONPATH")])))

VL_OVER = 0.02  # the band's 1% does not hold yet for VL-SFT: see the test
SIZES = {"small.png": (280, 280), "wide.png": (420, 280), "square.png": (392, 392)}  # (width, height)
CONFIG = """stage: VL-SFT
model_name_or_path: {model}
train_dataset_type: messages
train_dataset_path: vl.jsonl
train_dataset_prob: "1.0"
template: paddleocr_vl
max_seq_len: {max_seq_len}
continue_training: false
fine_tuning: Full
per_device_train_batch_size: 1
gradient_accumulation_steps: 1
max_steps: 3
logging_steps: 1
output_dir: ./out
save_strategy: "no"
disable_tqdm: true
learning_rate: 1.0e-4
seed: 23
device: cpu
compute_type: float32
amp_master_grad: false
_attn_implementation: eager
sharding: ""
do_train: true
"""


def write(folder, max_seq_len: int = 4096):
    sys.path.insert(0, str(FORMERS))
    from make_vl import write_data  # tests/specs/formers/: the tiny model's writer (needs PaddleFormers' tokenizers)

    write_data(folder, SIZES)
    path = folder / "vl.yaml"
    path.write_text(CONFIG.format(model=FORMERS / "paddleocr_vl", max_seq_len=max_seq_len))
    return path


@pytest.mark.slow(30)
def test_measure_trains_the_worst_row_at_the_workflows_peak(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path)
    monkeypatch.setenv("VRAMTUNE_VL_CPU_ATTENTION", "eager")
    code, out, said = cli("measure", path, "--device", "cpu", "--json")
    assert code == 0, said
    # the largest image (392x392) is raised to the same 588x616 as the smallest; the wide one has the most patches
    assert ("note: sequence length 544: the worst of the 3 training rows kept (max_seq_len 4096): row 2 (wide.png "
            "420x280 -> 728x532), 1976 patches, 544 tokens;") in said
    assert "the vision tower's attention: eager, measured with the CPU's own heads x P x P scores" in said
    probe = json.loads(out)["peak_bytes"]
    os.environ["VRAMTUNE_WORST_AUGMENTATION"] = "1"
    try:
        peak = workflow_peak(path, tmp_path)
    finally:
        del os.environ["VRAMTUNE_WORST_AUGMENTATION"]
    assert peak["steps"] == 3
    ratio = log_band(probe, peak["peak_bytes"], "VL-SFT worst row, eager vision attention")
    # over by 1.7% here (3.2 MB at 1,976 patches and 544 tokens; 0.85%, 7.9 MB, at 4,800 and 1,250): a gap that grows
    # with the row, its cause not found yet (docs/paddleformers.md); never under
    assert 1 - UNDER <= ratio <= 1 + VL_OVER, f"probe {probe:,} B / workflow {peak['peak_bytes']:,} B = {ratio:.4f}"

