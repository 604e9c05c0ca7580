"""`vramtune probe` end to end with real Paddle on CPU: each rung forced by a spec under tests/specs."""
from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, SPECS, gpu_present, needs_paddlenlp

from vramtune.core.records import Budget
from vramtune.core.strategy import Strategy

pytestmark = pytest.mark.paddle


def probe(cli, spec, *args):
    code, out, err = cli("probe", spec, "--json", *args)
    return code, json.loads(out), err


def used(result):
    return result["reserved_bytes"] or result["peak_bytes"]


@needs_paddlenlp
def test_bert_demo_config_tunes(cli):
    code, report, err = probe(cli, CONFIGS / "bert-mini-cpu.yaml")
    assert code == 0, err
    chosen, limit = report["chosen"], report["budget_bytes"] * (1 - report["headroom"])
    assert chosen is not None and used(chosen) <= limit
    plain = report["probes"][0]
    assert (plain["micro_batch"], plain["accumulation"], plain["status"]) == (32, 1, "over_budget")
    assert chosen["micro_batch"] * chosen["accumulation"] == 32
    assert set(report) >= {"spec", "device", "budget_bytes", "chosen", "probes", "seconds"}
    assert report["notes"][0].startswith("fp16-o2, bf16-o2, fp16, bf16 skipped: AMP cannot be measured on CPU: "
                                         "Paddle's auto_cast and amp.decorate (O2) have no effect there")
    assert "chosen: fp32, micro-batch" in err


def test_plain_rung(cli):
    code, report, _ = probe(cli, SPECS / "rung-plain.yaml")
    assert code == 0
    assert [p["status"] for p in report["probes"]] == ["fits"]
    assert report["chosen"]["accumulation"] == 1


def test_accumulation_rung(cli):
    code, report, _ = probe(cli, SPECS / "rung-accumulation.yaml")
    chosen = report["chosen"]
    assert code == 0 and chosen["accumulation"] > 1 and chosen["recomputed_blocks"] == 0
    assert report["probes"][0]["status"] == "over_budget"
    assert chosen in [{**p, "rung": chosen["rung"]} for p in report["probes"] if p["status"] == "fits"]


def test_recompute_rung(cli):
    code, report, _ = probe(cli, SPECS / "rung-recompute.yaml")
    chosen = report["chosen"]
    assert code == 0 and chosen["recomputed_blocks"] > 0
    assert used(chosen) <= report["budget_bytes"] * 0.95
    # without recompute, the smallest allowed micro-batch did not fit
    plain_1024 = [p for p in report["probes"] if p["micro_batch"] == 1024 and p["recomputed_blocks"] == 0]
    assert plain_1024 and plain_1024[0]["status"] == "over_budget"


def test_nothing_fits_exit_1_with_closest_miss(cli):
    code, report, err = probe(cli, SPECS / "rung-nothing.yaml")
    assert code == 1 and report["chosen"] is None
    closest = report["closest"]
    assert closest is not None and used(closest) > report["budget_bytes"] * 0.95
    needed = Budget(report["budget_bytes"], report["headroom"]).needed_for(used(closest))
    assert report["suggestions"][0].endswith(f" (at least {needed} bytes), under which the closest measured, "
                                             f"{Strategy.from_json(closest).label()}, fits")  # it suffices: tests/fast
    assert "nothing fits" in err and "closest:" in err and "over (" in err


@pytest.mark.slow(14)
def test_second_run_reuses_saved_results_and_fresh_reprobes(cli):
    spec = SPECS / "rung-accumulation.yaml"
    _, first, _ = probe(cli, spec)
    code, second, err = probe(cli, spec)
    assert code == 0 and second["reused"] == len(first["probes"])
    assert {**second["chosen"], "reused": False} == first["chosen"]
    assert f"reused {len(first['probes'])} saved probe(s)" in err
    _, third, _ = probe(cli, spec, "--fresh")
    assert third["reused"] == 0


def test_command_line_overrides(cli):
    code, report, _ = probe(cli, SPECS / "rung-accumulation.yaml", "--budget", "1GiB", "--target-batch", "512")
    assert code == 0 and report["budget_bytes"] == 2**30 and report["target_batch"] == 512
    assert report["chosen"]["micro_batch"] == 512


def test_search_flags_no_recompute_and_max_accumulation(cli):
    code, report, err = probe(cli, SPECS / "rung-accumulation.yaml", "--no-recompute", "--max-accumulation", "2",
                              "--precision", "fp32")
    assert code == 1 and report["chosen"] is None
    assert {p["micro_batch"] for p in report["probes"]} <= {2048, 1024}
    assert not any(p["recomputed_blocks"] for p in report["probes"])
    assert report["notes"] == []  # fp32 only: no AMP to skip
    assert "would fit with: a smaller micro-batch: lower train.target_batch or raise search.max_accumulation (now 2" in err


@pytest.mark.skipif(gpu_present(), reason="asserts what a CPU-only machine does")
def test_gpu_spec_on_a_cpu_only_machine_is_a_clear_error(cli):
    # a model this Python can build (bert-base-zh needs PaddleNLP, refused first where it is missing)
    code, out, err = cli("probe", CONFIGS / "mlp-python-cpu.yaml", "--device", "gpu")
    assert (code, out) == (2, "")
    assert err.startswith("error: device 'gpu': this Paddle build sees no GPU (paddle ")
    assert err.endswith("install a GPU build (see README) or run on CPU with --device cpu --budget SIZE\n")
