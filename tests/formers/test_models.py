"""PaddleFormers' models as its workflow builds them, on CPU: ERNIE-4.5 trains in the workflow at the probe's
peak; a file written for a GPU (bf16, flashmask attention, sharding stage 1, fused RMS norm by config.json's
default) is probed with the CPU equivalents and written back as the user's GPU file; an architecture PaddleFormers
builds through paddlefleet is named with that reason."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import needs_paddleformers
from formers_client import FORMERS, workflow_peak, write_config

pytestmark = [pytest.mark.paddle, needs_paddleformers]


def measured(cli, path, *flags) -> dict:
    code, out, err = cli("measure", path, "--device", "cpu", "--budget", "256MiB", "--json", *flags)
    assert code == 0, err
    return json.loads(out)


def test_ernie_4_5_lora_trains_in_the_workflow_at_the_probes_peak(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_config(tmp_path, model="ernie4_5", per_device_train_batch_size=2)
    probe = measured(cli, path, "--micro-batch", "2")
    assert probe["status"] == "fits" and probe["total_blocks"] == 2
    assert probe["trainable_params"] < probe["total_params"] / 4  # LoRA on PaddleFormers' ERNIE-4.5 targets
    peak = workflow_peak(path, tmp_path)
    assert abs(peak["peak_bytes"] - probe["peak_bytes"]) <= 0.05 * probe["peak_bytes"], (peak, probe)


def test_a_gpu_file_is_probed_on_cpu_with_cpu_equivalents_and_written_back_as_it_was(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "ernie"
    shutil.copytree(FORMERS / "ernie4_5", folder)
    config = json.loads((folder / "config.json").read_text())
    del config["fuse_rms_norm"]  # PaddleFormers' RMSNorm then runs its fused kernel, which CPUs do not have
    (folder / "config.json").write_text(json.dumps(config))
    gpu = {"compute_type": "bf16", "_attn_implementation": "flashmask", "sharding": "stage1", "device": None,
           "amp_master_grad": None}
    path = write_config(tmp_path, model_name_or_path=str(folder), per_device_train_batch_size=2, **gpu)
    code, _, err = cli("apply", path, "--device", "cpu", "--budget", "256MiB", "-o", tmp_path / "out.yaml",
                       "--json", "--no-verify")
    assert code == 0, err
    assert ("probed on CPU with the CPU equivalents of compute_type: 'bf16' -> 'float32', sharding: 'stage1' -> '', "
            "_attn_implementation: 'flashmask' -> 'eager'; fused kernels off") in " ".join(err.split())
    written = yaml.safe_load((tmp_path / "out.yaml").read_text())
    assert {key: written[key] for key in ("compute_type", "_attn_implementation", "sharding")} == {
        "compute_type": "bf16", "_attn_implementation": "flashmask", "sharding": "stage1"}


def test_an_architecture_built_through_paddlefleet_is_named_with_the_reason(cli, tmp_path):
    path = write_config(tmp_path, model="qwen3", train_dataset_path=None)
    code, _, err = cli("measure", path, "--device", "cpu", "--budget", "256MiB", "--micro-batch", "1")
    assert code == 2
    assert "PaddleFormers builds this architecture through paddlefleet, which is not on PyPI" in " ".join(err.split())
