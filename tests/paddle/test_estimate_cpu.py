"""`vramtune estimate` on real Paddle (CPU, fp32): the tiny Llama estimated from probes at depth 1 and 2 against
probes of the whole model (recompute's saving from depth 2 and 3), with none, half or every layer recomputed, and
with data parallel's buffers measured at 2 ranks."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import SPECS, needs_paddlenlp

pytestmark = [pytest.mark.paddle, needs_paddlenlp]


@pytest.fixture
def llama_arguments(tmp_path, monkeypatch):
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "per_device_train_batch_size": 8,
                                "max_length": 256, "device": "cpu"}))
    return path


def estimated(cli, path, *flags) -> dict:
    code, out, err = cli("estimate", path, "--card", "1GiB", "--json", *flags)
    assert code == 0, err
    return json.loads(out)


def measured_peak(cli, path, *flags) -> int:
    code, out, err = cli("measure", path, "--micro-batch", 8, "--budget", "1GiB", "--json", *flags)
    assert code == 0, err
    return json.loads(out)["peak_bytes"]


def row(report: dict, **where) -> dict:
    return next(r for r in report["rows"] if all(r[key] == value for key, value in where.items()))


@pytest.mark.slow(23)
def test_the_estimate_from_two_shallow_copies_matches_the_whole_models_peak(cli, llama_arguments):
    report = estimated(cli, llama_arguments)
    assert report["depth_probed"] == "depth 1, 2, 3 of 4" and report["counts"]["layers"] == 4
    for blocks, flags in ((0, ()), (2, ("--recompute", 2)), (4, ("--recompute", 4))):  # part of the layers too
        predicted = row(report, precision="fp32", micro_batch=8, recomputed_blocks=blocks)
        actual = measured_peak(cli, llama_arguments, *flags)
        assert predicted["peak_bytes"] == pytest.approx(actual, rel=0.03), (blocks, predicted, actual)


@pytest.mark.slow(37)
def test_data_parallel_buffers_measured_at_two_ranks_match_a_two_rank_probe(cli, llama_arguments):
    report = estimated(cli, llama_arguments, "--devices", "2")
    assert report["buffer_ratio"] > 0.5  # the buffers hold the fused gradients
    predicted = row(report, precision="fp32", micro_batch=8, recomputed_blocks=0, sharding_stage=0)
    actual = measured_peak(cli, llama_arguments, "--devices", "2")
    assert predicted["peak_bytes"] == pytest.approx(actual, rel=0.03), (predicted, actual)
