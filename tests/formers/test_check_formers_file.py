"""`vramtune check` gates the PaddleFormers demo config itself (no tuned: section) for real on CPU: its own strategy
(per_device_train_batch_size 4, gradient_accumulation_steps 1, float32) probed in a Paddle child, exit 0 within the
budget and 1 over it. tests/fast/test_check_file.py holds the reading and the bad input, without Paddle."""
from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, ROOT, needs_paddleformers

from vramtune.recorded_budget import with_budget_line

pytestmark = [pytest.mark.paddle, needs_paddleformers]
DEMO = CONFIGS / "formers-sft-lora-cpu.yaml"


def test_the_demo_config_passes_its_budget_and_fails_a_tiny_one(cli, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # the config names its model folder and data from the repository's root
    code, out, err = cli("check", DEMO, "--budget", "64MiB", "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["reasons"]) == (0, "pass", []), err
    measured = verdict["measured"]
    assert (measured["precision"], measured["micro_batch"], measured["accumulation"], measured["recomputed_blocks"]) \
        == ("fp32", 4, 1, 0)
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=0 (--budget 64.0 MiB)\nfp32 m=4 k=1 r=0: fits\n")
    assert err.endswith("check: pass\n")

    # the same file with the budget recorded as apply would write it for YAML, 1 MiB: under the measured peak
    recorded = tmp_path / "sft.tuned.yaml"
    recorded.write_text(with_budget_line(DEMO.read_text(), 2**20))
    code, out, err = cli("check", recorded, "--json")
    verdict = json.loads(out)
    peak = verdict["measured"]["peak_bytes"]
    assert peak > verdict["limit_bytes"] == int(2**20 * 0.95)
    assert (code, verdict["status"]) == (1, "fail")
    assert verdict["reasons"] == [f"peak {peak} bytes ({peak / 2**20:.1f} MiB) no longer fits the limit 996147 bytes "
                                  "(972.8 KiB = budget 1048576 less 5% headroom)"]
    assert err.startswith("note: the file's strategy: fp32 m=4 k=1 r=0 (the budget it records 1.0 MiB)\n")
    assert err.endswith("check: fail\n")
