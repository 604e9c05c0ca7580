"""apply verifies a spec's answer with the user's own loop (`--verify-with`, issue 36), for real on CPU: the shipped
MLP spec, verified by examples/train_tuned.py (a vramtune.runtime loop of 20 steps, stopped by the hook after 3); the loop's peak, read
by the verification hook from its start, is at least the probe's and is reported beside it."""
from __future__ import annotations

import json
import shutil
import sys

import pytest
from conftest import CONFIGS, ROOT

pytestmark = pytest.mark.paddle


def test_the_users_loop_verifies_the_specs_answer(cli, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("mlp-python-cpu.yaml", "mlp_model.py"):
        shutil.copy(CONFIGS / name, folder)
    command = f"{sys.executable} examples/train_tuned.py {{file}}"  # 20 steps: the hook stops it after 3
    code, out, err = cli("apply", folder / "mlp-python-cpu.yaml", "--verify-with", command, "--json")
    assert code == 0, err
    payload = json.loads(out)
    [run] = payload["verification"]
    assert (run["tool"], run["status"], run["error"], run["steps"]) == (
        "your training loop (vramtune.runtime)", "fits", None, 3)
    assert 1.0 <= run["ratio"] <= 1.1, run  # the loop holds what the probe measured, and its own start-up besides
    assert "verified by your training loop (vramtune.runtime): " in err
    assert sorted(path.name for path in folder.iterdir()) == ["mlp-python-cpu.tuned.yaml", "mlp-python-cpu.yaml",
                                                                "mlp_model.py"]
