"""`vramtune check` gates the PaddleFormers demo config itself (no tuned: section) for real on CPU: its own strategy
(per_device_train_batch_size 4, gradient_accumulation_steps 1, float32) probed in a Paddle child, exit 0 within the
budget and 1 over it; and the file `apply` writes, which records its budget, without --budget.
tests/fast/test_check_file.py holds the reading and the bad input, without Paddle."""
from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, ROOT, needs_paddleformers

pytestmark = [pytest.mark.paddle, needs_paddleformers]
DEMO = CONFIGS / "formers-sft-lora-cpu.yaml"


def test_the_demo_config_passes_its_budget(cli, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config names its model folder and data from the repository's root
    code, out, err = cli("check", "--no-verify", DEMO, "--budget", "64MiB", "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["reasons"]) == (0, "pass", []), err
    measured = verdict["measured"]
    assert (measured["precision"], measured["micro_batch"], measured["accumulation"], measured["recomputed_blocks"]) \
        == ("fp32", 4, 1, 0)
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=0 (--budget 64.0 MiB)\nfp32 m=4 k=1 r=0: fits\n")
    assert err.endswith("check: pass\n")


def test_the_file_apply_writes_records_its_budget_and_check_gates_it_without_one(cli, monkeypatch, tmp_path):
    """apply at 64 MiB (m=4 k=1 the only strategy: no accumulation, no recompute) writes the budget as a comment;
    check reads it (exit 0), and a tiny --budget overrides it (exit 1)."""
    monkeypatch.chdir(ROOT)
    tuned = tmp_path / "sft.tuned.yaml"
    code, _, err = cli("apply", DEMO, "--device", "cpu", "--budget", "64MiB", "--no-recompute",
                       "--max-accumulation", "1", "--no-verify", "-o", tuned)
    assert code == 0, err
    assert tuned.read_text() == ("# vramtune: tuned for a budget of 64.0 MiB (67108864 bytes); `vramtune check FILE` "
                                 "gates it in CI\n" + DEMO.read_text())  # m=4 k=1 is the file's own batch
    code, out, err = cli("check", "--no-verify", tuned, "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["limit_bytes"]) == (0, "pass", int(64 * 2**20 * 0.95)), err
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=0 (the budget it records 64.0 MiB)\n"
                          "fp32 m=4 k=1 r=0: fits\n")

    code, out, err = cli("check", "--no-verify", tuned, "--budget", "1MiB", "--json")
    verdict = json.loads(out)
    peak = verdict["measured"]["peak_bytes"]
    assert (code, verdict["status"]) == (1, "fail"), err
    assert verdict["reasons"] == [f"peak {peak} bytes ({peak / 2**20:.1f} MiB) no longer fits the limit 996147 bytes "
                                  "(972.8 KiB = budget 1048576 less 5% headroom)"]
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=0 (--budget 1.0 MiB)\n")
    assert err.endswith("check: fail\n")


def test_a_file_recomputing_every_layer_is_measured_at_the_models_layers(cli, monkeypatch, tmp_path):
    """The keys apply writes when it chooses recompute on the demo's 2-layer Llama (every layer, the only combination
    PaddleFormers' Llama honours): check reads r=2, its config.json's num_hidden_layers, and measures what
    `measure -m 4 -k 1 -r 2` measures; over a tiny budget, exit 1."""
    monkeypatch.chdir(ROOT)
    path = tmp_path / "sft.recompute.yaml"
    path.write_text(DEMO.read_text().replace("gradient_accumulation_steps: 1\n", "gradient_accumulation_steps: 1\n"
                    "recompute_granularity: full\nrecompute_method: uniform\nrecompute_num_layers: 1\n"))
    code, out, err = cli("measure", path, "-m", "4", "-k", "1", "-r", "2", "--budget", "64MiB", "--json")
    assert code == 0, err
    peak = json.loads(out)["peak_bytes"]
    code, out, err = cli("check", "--no-verify", path, "--budget", "64MiB", "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["measured"]["recomputed_blocks"]) == (0, "pass", 2), err
    assert verdict["measured"]["peak_bytes"] == peak  # a probe of its own (not reused), to the byte
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=2 (--budget 64.0 MiB)\n"
                          "fp32 m=4 k=1 r=2: fits\n"
                          f"  peak {peak / 2**20:.1f} MiB allocated (budget 64.0 MiB)\n")
    code, out, err = cli("check", "--no-verify", path, "--budget", "1MiB", "--json")
    assert (code, json.loads(out)["reasons"]) == (1, [
        f"peak {peak} bytes ({peak / 2**20:.1f} MiB) no longer fits the limit 996147 bytes (972.8 KiB = budget 1048576 "
        "less 5% headroom)"]), err
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=2 (--budget 1.0 MiB)\n") and \
        err.endswith("check: fail\n")
