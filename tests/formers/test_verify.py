"""apply verifies its answer with PaddleFormers' own workflow before writing it (issue 36), for real on CPU: the demo
config at 4 MiB chooses m=2 x k=2 or m=1 x k=4, whichever ran faster (accumulation: PaddleFormers' Trainer calls paddle.device.synchronize, which the
verification hook makes a no-op on a CPU and says so); the workflow trains the tuned file for 3 optimizer steps and
its peak is reported beside the probe's. The oracle is independent of vramtune's hook: the workflow run again on the
written file by the tests' own hook (tests/formers/hook), for the same 3 steps."""
from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, ROOT, needs_paddleformers
from formers_client import workflow_peak

pytestmark = [pytest.mark.paddle, needs_paddleformers]
DEMO = CONFIGS / "formers-sft-lora-cpu.yaml"


def test_the_demos_answer_is_verified_by_the_workflow_at_the_peak_the_workflow_has(cli, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # the config names its model folder and data from the repository's root
    tuned = tmp_path / "demo.tuned.yaml"
    code, out, err = cli("apply", DEMO, "--device", "cpu", "--budget", "4MiB", "-o", tuned, "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["exported"]["accumulation"] >= 2  # m=4 (6.2 MiB) does not fit: the Trainer synchronizes
    [run] = payload["verification"]
    assert (run["tool"], run["status"], run["steps"]) == ("PaddleFormers' workflow", "fits", 3)
    assert run["probe_bytes"] == payload["exported"]["peak_bytes"]
    assert 0.995 <= run["peak_bytes"] / run["probe_bytes"] <= 1.01  # the band: within 1%, never under by 0.5%
    said = err.splitlines()
    verified = next(line for line in said if line.startswith("verified by PaddleFormers' workflow: "))
    assert verified.endswith(" of 3.8 MiB: fits ({:.1f}s)".format(run["seconds"]))
    assert said[said.index(verified) + 1] == ("  paddle.device.synchronize stubbed (a no-op on a CPU, which has no queue "
                                              "to wait for)")
    assert not list(tmp_path.glob(".*"))  # the verified copy is gone
    oracle = workflow_peak(tuned, ROOT, "max_steps=3", f"output_dir={tmp_path / 'out'}")
    # two runs of the same workflow: a CI run read them 0.53% apart (2,188,340 / 2,199,984 B, the loader's read-ahead
    # at the peak varies with load)
    assert oracle["steps"] == 3 and abs(run["peak_bytes"] / oracle["peak_bytes"] - 1) <= 0.01
    code, out, err = cli("check", tuned, "--json")  # the gate runs the workflow on the written file itself
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["verification"]["status"]) == (0, "pass", "fits"), err
    assert 0.995 <= verdict["verification"]["ratio"] <= 1.01
