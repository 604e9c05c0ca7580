"""`vramtune estimate` over a fake device (no Paddle): the arithmetic, the command's output and exit codes, and the
published model-state figures for Llama-7B."""
from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, mlp_spec
from fakes import FakeDevice, MiB

from vramtune.core.strategy import Strategy
from vramtune.memory.state import Counts, Given, state
from vramtune.plugins import MECHANISMS
from vramtune.spec import load_spec

SPEC = CONFIGS / "mlp-python-cpu.yaml"  # target 2048


def test_estimate_predicts_what_the_device_measures(fake_cli):
    device = FakeDevice(fixed=20 * MiB, per_sample=MiB / 20, saved=MiB / 200, blocks=6)
    cli, backend = fake_cli(device)
    code, out, err = cli("estimate", SPEC, "--card", "64MiB", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["depth_probed"] == "full depth" and report["probes"] == len(backend.jobs) == 3  # m=1, 2, recompute
    fp32 = {(r["micro_batch"], r["recomputed_blocks"]): r for r in report["rows"] if r["precision"] == "fp32"}
    for (micro, recomputed), row in fp32.items():  # linear fake physics: the CPU fp32 figures are exact
        expected = device.fixed + micro * (device.per_sample - device.saved * recomputed)
        assert row["peak_bytes"] == pytest.approx(expected, rel=1e-4), (micro, recomputed)
        assert row["reserved_bytes"] == pytest.approx(expected * 1.08, rel=1e-4)  # the stated GPU reserve
        assert row["fits"] == (row["reserved_bytes"] <= 64 * MiB * 0.95)
    o2 = next(r for r in report["rows"] if r["precision"] == "fp16-o2" and r["micro_batch"] == 256)
    assert o2["activations"] == pytest.approx(0.5 * 256 * device.per_sample, rel=1e-4)  # the stated O2 factor
    best = report["best"]
    assert best["precision"] in ("fp16-o2", "bf16-o2") and not best["recomputed_blocks"]
    assert "predicted best: " in err and "what fills it: weights 2.5 MiB, gradients 2.5 MiB, optimizer state 15.0" in err
    assert "assumed (stated): AMP O1 activations x0.55 of fp32's, O2 x0.5, the GPU allocator's reserve +8%" in err


def test_estimate_exit_codes(fake_cli):
    cli, _ = fake_cli(FakeDevice(fixed=200 * MiB, per_sample=MiB, blocks=6))
    code, _, err = cli("estimate", SPEC, "--card", "64MiB")
    assert code == 1 and "nothing is predicted to fit 60.8 MiB" in err
    code, out, err = cli("estimate", SPEC, "--card", "12 parsecs")
    assert (code, out) == (2, "") and err == (f"error: {SPEC}: --card: unknown unit 'parsecs' in '12 parsecs' (use B, "
                                              "KiB, MiB, GiB, TiB, KB, MB, GB, TB)\n")
    code, _, err = cli("estimate", SPEC)
    assert code == 2 and "Missing option '--card'" in err
    code, _, err = cli("estimate", SPEC, "--card", "1GiB", "--devices", "3")
    assert code == 2 and "train.target_batch: 2048 cannot be shared by 3 devices" in err


def test_sharding_divides_the_counted_state_by_the_ranks_and_data_parallel_buffers_are_measured_at_two(fake_cli):
    cli, backend = fake_cli(FakeDevice(fixed=160 * MiB, per_sample=MiB / 100, blocks=6, dp_buffer=30 * MiB))
    code, out, err = cli("estimate", SPEC, "--card", "1GiB", "--devices", "8", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [job.strategy["devices"] for job in backend.jobs] == [1, 1, 1, 2]  # m=1, m=2, recompute; then 2 ranks
    assert report["buffer_ratio"] == pytest.approx(30 / 40)  # the buffers over the 40 MiB of fp32 gradients
    rows = {(r["precision"], r["sharding_stage"]): r for r in report["rows"] if r["micro_batch"] == 256
            and not r["recomputed_blocks"]}
    full = rows[("fp32", 0)]
    assert full["buffers"] == pytest.approx(30 * MiB, rel=1e-6) and rows[("fp32", 1)]["buffers"] == 0
    assert rows[("bf16-o2", 0)]["buffers"] == pytest.approx(15 * MiB, rel=1e-6)  # half gradients, half buffers
    assert rows[("fp32", 1)]["optimizer_state"] == full["optimizer_state"] // 8
    assert rows[("fp32", 2)]["gradients"] == full["gradients"] // 8
    assert rows[("fp32", 3)]["weights"] == full["weights"] // 8
    assert "data parallel's fused gradient buffers (x0.75 of the gradients at 2 ranks" in err


LLAMA_7B = Counts(params=6_738_415_616, trainable=6_738_415_616, layernorm=0, matmul=6_607_343_616, layers=32)


def _state(counts: Counts, precision: str, **fields: int) -> dict[str, int]:
    return state(MECHANISMS, counts, Strategy(precision=precision, **fields), Given("adamw"))


def test_llama_7b_model_states_equal_the_published_formulas():
    """fp32 AdamW: 16 B/param (Accelerate's "Training using Adam" for float32); mixed precision with fp32 master
    weights: 2 + 2 + 12 (the ZeRO paper, Paddle's O2); ZeRO stages over 8: 4P + 12P/8, 2P + 14P/8, 16P/8. Each
    figure comes from the mechanisms' own counted_state (precision's bytes, sharding's partitions)."""
    p = LLAMA_7B.params
    fp32, o2, o1 = (sum(_state(LLAMA_7B, precision).values()) for precision in ("fp32", "bf16-o2", "bf16"))
    assert fp32 == o2 == 16 * p == 107_814_649_856
    assert o1 == 16 * p + 2 * LLAMA_7B.matmul  # + O1's half copies of the matmul weights
    stages = [sum(_state(LLAMA_7B, "bf16-o2", devices=8, sharding_stage=stage).values()) for stage in (1, 2, 3)]
    assert stages == [4 * p + 12 * p / 8, 2 * p + 14 * p / 8, 16 * p / 8]
    lora = Counts(params=p + 19_988_480, trainable=19_988_480, matmul=LLAMA_7B.matmul, layers=32)  # LoRA r=8
    assert _state(lora, "bf16-o2")["optimizer_state"] == 12 * 19_988_480  # the frozen weights: none
    assert _state(lora, "bf16-o2")["weights"] == 2 * lora.params


def test_the_estimate_command_refuses_what_the_spec_reader_refuses(fake_cli, write_spec):
    cli, backend = fake_cli(FakeDevice())
    path = write_spec({"model": {"source": "python"}}, "bad.yaml")
    code, _, err = cli("estimate", path, "--card", "1GiB")
    assert code == 2 and backend.jobs == [] and "model.factory: is required" in err
    assert load_spec(SPEC).train.target_batch == 2048


def test_calibrate_replaces_the_stated_factors_with_a_gpu_runs(fake_cli, write_spec, tmp_path):
    """A GPU run's `probe --json` report: each AMP level's activations over the CPU estimate of fp32's, and what the
    allocator reserved beyond the peak (this fake's physics: O1 x0.6 with half weight copies, O2 x0.45, +10%)."""
    from conftest import mlp_spec

    card = FakeDevice(kind="gpu", name="fake A100", card_bytes=2**30, fixed=32 * MiB, per_sample=MiB / 4,
                      amp_factor=0.6, o2_factor=0.45, amp_cast_bytes=32 * MiB / 8, fragmentation=0.1, blocks=6)
    cli, _ = fake_cli(card)
    path = write_spec(mlp_spec(device="gpu", budget="256MiB"), "gpu.yaml")
    code, out, err = cli("probe", path, "--json")
    assert code == 0, err
    (tmp_path / "gpu.json").write_text(out)
    code, out, err = cli("estimate", path, "--card", "1GiB", "--calibrate", tmp_path / "gpu.json", "--json")
    assert code == 0, err
    factors = json.loads(out)["factors"]
    assert factors["o1_activations"] == pytest.approx(0.6, rel=0.01) and factors["o2_activations"] == pytest.approx(
        0.45, rel=0.01)
    assert factors["fragmentation"] == pytest.approx(0.1, abs=0.01)  # rounded up to the allocator's blocks
    assert factors["source"].startswith("calibrated from ") and "assumed (calibrated from " in err
    probes = [line for line in err.splitlines() if line.startswith("  probe ")]
    assert probes and len(probes) == len(set(probes)), probes  # each CPU probe once: the fit calibrates and predicts
    code, _, err = cli("estimate", path, "--card", "1GiB", "--calibrate", tmp_path / "missing.json")
    assert code == 2 and "missing.json" in err


def test_a_probe_that_cannot_run_here_is_one_clear_error(fake_cli):
    cli, _ = fake_cli(FakeDevice(kind="gpu", card_bytes=MiB, fixed=20 * MiB, per_sample=MiB))  # this "CPU" OOMs
    code, out, err = cli("estimate", SPEC, "--card", "80GB")
    assert (code, out) == (2, "") and err.endswith(
        "error: the estimate's CPU probe at micro-batch 1 did not measure (oom): MemoryError: (ResourceExhausted) Out "
        "of memory\n"), err


def test_seq_len_and_batch_are_refused_for_a_spec(fake_cli):
    cli, backend = fake_cli(FakeDevice())
    for flag in ("--seq-len", "--batch"):
        assert cli("estimate", SPEC, "--card", "1GiB", flag, "64") == (
            2, "", f"error: {SPEC}: {flag}: applies to a model folder, a config.json or a PaddleFormers config: a "
                   "spec's sequence length and target batch are its own (edit them in the file)\n")
    assert backend.jobs == []


def test_the_rows_explore_what_the_specs_settings_allow(fake_cli, write_spec):
    """The rows explore what the spec's settings allow: the AMP modes allowed, sharding off, recompute off."""
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=MiB / 100, saved=MiB / 1000, blocks=6))
    path = write_spec(mlp_spec(**{"search.precisions": ["bf16-o2"], "search.sharding": "off",
                                  "search.recompute": "off"}))
    code, out, err = cli("estimate", path, "--card", "1GiB", "--devices", "4", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert sorted({(r["precision"], r["sharding_stage"], r["recomputed_blocks"], r["devices"]) for r in rows}) == [
        ("bf16-o2", 0, 0, 4), ("fp32", 0, 0, 4)]
    assert [(r["precision"], r["micro_batch"], r["accumulation"]) for r in rows[:3]] == [  # 512 a rank, innermost
        ("fp32", 512, 1), ("fp32", 256, 2), ("fp32", 128, 4)]
    assert "recompute not estimated" not in err  # off, not unfound


def test_a_model_without_repeated_blocks_says_recompute_was_not_estimated(fake_cli):
    cli, backend = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=MiB / 100, blocks=0))
    code, out, err = cli("estimate", SPEC, "--card", "1GiB", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert len(backend.jobs) == 2 and {r["recomputed_blocks"] for r in report["rows"]} == {0}
    assert report["notes"][-1] == "recompute not estimated: the model has no repeated blocks vramtune recomputes"


def test_calibrating_takes_a_kits_ema_out_of_both_sides():
    """A GPU probe of a PaddleOCR config with Global.use_ema holds the EMA's fp32 shadows and the kept copies of the
    weights at its own precision (held.py), the CPU fit holds them in fp32: the AMP factor is the activations' alone."""
    from vramtune.core.records import ProbeResult
    from vramtune.estimating.factors import calibrated
    from vramtune.memory import held
    from vramtune.memory.state import ActivationFit

    counts = Counts(params=1_000_000, trainable=1_000_000, layers=4, ema_elements=1_000_000, state_copies=2)
    fit = ActivationFit(a0=held.probed(counts), b0=8_000_000, b1=0)  # the CPU probes: 8 MB a sample, plus the EMA
    strategy = Strategy(precision="bf16-o2", micro_batch=2)
    parts = state(MECHANISMS, counts, strategy, Given())
    kept = held.held(counts, parts["weights"])
    assert kept == 4_000_000 + 2 * parts["weights"] < held.probed(counts)  # the copies in half precision
    probe = ProbeResult("fits", strategy, peak_bytes=sum(parts.values()) + kept + int(0.45 * 16_000_000),
                        weight_bytes=parts["weights"], gradient_bytes=parts["gradients"],
                        optimizer_bytes=parts["optimizer_state"])
    assert calibrated([probe], counts, fit).o2_activations == pytest.approx(0.45)
