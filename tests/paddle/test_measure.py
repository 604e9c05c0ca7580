"""`vramtune measure`: one real, isolated Paddle probe on CPU for each model source."""
from __future__ import annotations

import json

import pytest
import yaml
from conftest import CONFIGS, SPECS, needs_paddlenlp

pytestmark = pytest.mark.paddle

KEYS = {"status", "precision", "micro_batch", "accumulation", "recomputed_blocks", "total_blocks", "peak_bytes",
        "reserved_bytes", "budget_bytes", "step_seconds", "samples_per_sec", "loss", "device", "paddle_version",
        "error"}


def measure(cli, spec, *args):
    code, out, err = cli("measure", spec, "--json", *args)
    result = json.loads(out)
    assert code == (0 if result["status"] == "fits" else 1), err  # measure: 0 only when the probe fits
    return result


@pytest.mark.parametrize("config, micro, blocks", [
    ("mlp-python-cpu.yaml", 256, 6),
    ("resnet18-cpu.yaml", 4, 8),
])
def test_each_source_measures_real_memory(cli, config, micro, blocks):
    result = measure(cli, CONFIGS / config, "--micro-batch", micro)
    assert set(result) >= KEYS
    assert result["status"] in ("fits", "over_budget")
    assert result["peak_bytes"] > 1_000_000 and result["reserved_bytes"] is None
    assert result["total_blocks"] == blocks
    assert result["samples_per_sec"] > 0 and result["step_seconds"] > 0
    assert result["device"]["kind"] == "cpu" and result["error"] is None


@needs_paddlenlp
@pytest.mark.slow(16)
def test_bert_memory_curve(cli, write_spec):
    """Peak doubles-ish with the micro-batch, falls with each block recomputed by the wrapper (block_path given),
    falls with BERT's own all-layer recompute, and repeats within 2%."""
    spec = CONFIGS / "bert-mini-cpu.yaml"
    base = measure(cli, spec, "--micro-batch", 8)
    assert base["status"] in ("fits", "over_budget") and base["peak_bytes"] > 0 and base["total_blocks"] == 4
    double = measure(cli, spec, "--micro-batch", 16)
    assert 1.6 <= double["peak_bytes"] / base["peak_bytes"] <= 2.4
    native = measure(cli, spec, "--micro-batch", 8, "--recompute", 4)
    assert native["block_path"] == "bert layers (PaddleNLP's own recompute)"
    assert native["peak_bytes"] < 0.8 * base["peak_bytes"]
    wrapped = write_spec({**yaml.safe_load(spec.read_text()), "model": {
        **yaml.safe_load(spec.read_text())["model"], "block_path": "bert.encoder.layers"}})
    curve = [base["peak_bytes"]] + [measure(cli, wrapped, "--micro-batch", 8, "--recompute", r)["peak_bytes"]
                                    for r in (1, 2, 3)]
    assert curve == sorted(curve, reverse=True) and len(set(curve)) == 4, curve
    again = measure(cli, spec, "--micro-batch", 8)
    assert abs(again["peak_bytes"] - base["peak_bytes"]) <= 0.02 * base["peak_bytes"]


@needs_paddlenlp
def test_gpt_causal_lm_source(cli, write_spec):
    spec = write_spec({
        "name": "gpt-tiny", "model": {"source": "paddlenlp", "config": "gpt2-small-en",
                                      "task": "causal-lm", "overrides": {"num_hidden_layers": 2, "hidden_size": 32,
                                                                         "num_attention_heads": 2,
                                                                         "intermediate_size": 64,
                                                                         "vocab_size": 500}},
        "data": {"seq_len": 16}, "train": {"target_batch": 4}, "device": "cpu", "budget": "1GiB",
        "probe": {"steps": 1, "warmup": 1, "timeout": 120}})
    result = measure(cli, spec, "--micro-batch", 4, "--recompute", 2, "--granularity", "core_attn")
    assert result["status"] == "fits" and result["total_blocks"] == 2 and result["loss"] > 0
    assert result["recompute_options"] == {"granularities": ["core_attn"], "partial": False}


@pytest.mark.parametrize("precision", ["fp16", "bf16-o2"])
def test_amp_on_cpu_is_unsupported_not_faked(cli, precision):
    code, out, err = cli("measure", CONFIGS / "mlp-python-cpu.yaml", "--micro-batch", 256, "--precision", precision,
                         "--json")
    result = json.loads(out)
    assert code == 0
    assert result["status"] == "unsupported" and result["peak_bytes"] is None
    assert result["error"].startswith("AMP cannot be measured on CPU")
    assert err.startswith(f"{precision} m=256 k=8 r=0: unsupported\n")


def test_sharding_stage_1_over_two_ranks_halves_the_optimizer_state_per_rank(cli):
    """Two CPU ranks (gloo) of a model whose AdamW state dominates: stage 1 keeps half the state per rank."""
    results = {}
    for stage, exit_code in ((0, 1), (1, 0)):
        code, out, err = cli("measure", SPECS / "two-ranks.yaml", "--micro-batch", 16, "--sharding-stage", stage,
                             "--json")
        results[stage] = json.loads(out)
        assert code == exit_code, err
    plain, sharded = results[0], results[1]
    assert (plain["status"], sharded["status"]) == ("over_budget", "fits")  # budget 64 MiB
    assert len(plain["rank_peak_bytes"]) == len(sharded["rank_peak_bytes"]) == 2
    assert sharded["optimizer_bytes"] == pytest.approx(plain["optimizer_bytes"] / 2, rel=0.01)
    assert max(sharded["rank_peak_bytes"]) < 0.6 * plain["peak_bytes"]


def test_a_relative_spec_path_finds_the_model_module_next_to_the_spec(cli, tmp_path, monkeypatch):
    """The child runs in a temporary folder: the spec's folder must reach it resolved (nothing on PYTHONPATH)."""
    import shutil

    (tmp_path / "configs").mkdir()
    shutil.copy(CONFIGS / "mlp-python-cpu.yaml", tmp_path / "configs" / "mlp.yaml")
    shutil.copy(CONFIGS / "mlp_model.py", tmp_path / "configs" / "mlp_model.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH")
    code, out, err = cli("measure", "configs/mlp.yaml", "--micro-batch", 64, "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "fits"


@needs_paddlenlp
def test_zero_padding_batches_carry_their_attention_masks(cli, tmp_path, monkeypatch):
    """The llm scripts' zero padding (intokens) feeds each row its [seq, seq] causal mask: measured, not ignored."""
    import shutil

    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    monkeypatch.chdir(tmp_path)
    peaks = []
    for zero_padding in (False, True):
        path = tmp_path / f"args-{zero_padding}.json"
        path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "per_device_train_batch_size": 8,
                                    "max_length": 256, "device": "cpu", "zero_padding": zero_padding}))
        peaks.append(measure(cli, path, "--micro-batch", 8, "--budget", "1GiB")["peak_bytes"])
    assert peaks[1] - peaks[0] >= 8 * 256 * 256, peaks  # at least the boolean masks themselves
