"""apply verifies a spec's answer with the user's own loop (`--verify-with`, issue 36), for real on CPU: the shipped
MLP spec, verified by examples/train_tuned.py (a vramtune.runtime loop of 20 steps, stopped by the hook after 3); the loop's peak, read
by the verification hook from its start, is reported beside the probe's."""
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
    shutil.copy(CONFIGS / "mlp_model.py", folder)
    # one micro-batch to choose from (m=256 x k=8): which one the search takes follows this machine's throughput, and
    # this MLP's peak at m=512 moved between runs, in the probe and in the loop alike (31.3 and 33.2 MB; the loop
    # +12.4% over its probe in a loaded CI run): not what this test is about (issue 36's note)
    (folder / "mlp-python-cpu.yaml").write_text((CONFIGS / "mlp-python-cpu.yaml").read_text().replace(
        "  timeout: 60\n", "  timeout: 60\nsearch:\n  micro_batches: [256]\n"))
    command = f"{sys.executable} examples/train_tuned.py {{file}}"  # 20 steps: the hook stops it after 3
    code, out, err = cli("apply", folder / "mlp-python-cpu.yaml", "--verify-with", command, "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert (payload["chosen"]["micro_batch"], payload["chosen"]["accumulation"]) == (256, 8)
    [run] = payload["verification"]
    assert (run["tool"], run["status"], run["error"], run["steps"]) == (
        "your training loop (vramtune.runtime)", "fits", None, 3)
    # the loop's peak beside the probe's: this MLP's peaks, the probe's and the loop's alike, move with the machine's
    # load (quiet, Paddle 3.3.1: equal to the byte in 5 runs; three runs at once: 1.2108 and 0.9603; Paddle 2.6, which
    # cannot reset its peak: 0.9803 to 1.0163), cause not found (issue 36's note). What this test holds is that the
    # loop is verified and said; the tool-to-probe agreement is the real-client tests' (tests/formers, tests/kits).
    assert 0.8 <= run["ratio"] <= 1.3, run
    assert "verified by your training loop (vramtune.runtime): " in err
    assert sorted(path.name for path in folder.iterdir()) == ["mlp-python-cpu.tuned.yaml", "mlp-python-cpu.yaml",
                                                                "mlp_model.py"]


KIT_LOOP = '''import paddle
import program  # imported after start-up, as a kit's tools/train.py imports tools.program

model = paddle.nn.Linear(256, 256)
optimizer = paddle.optimizer.AdamW(parameters=model.parameters())
for step in range(1, 10):
    model(paddle.randn([8, 256])).mean().backward()
    optimizer.step()
    optimizer.clear_grad()
    if step % 3 == 0:
        program.eval(model)
'''
KIT_EVAL = '''import paddle


def eval(model):
    with paddle.no_grad():
        held = paddle.zeros([4, 1 << 20])  # 16 MiB: the evaluation's own
        return float(model(paddle.randn([8, 256])).mean()) + float(held.sum())
'''


def test_a_kits_evaluation_after_the_last_step_is_read_apart_and_ends_the_run(tmp_path):
    """The hook's part for PaddleOCR (issue 36), on a loop of the same shape: a function the hook is told of by name
    ("program:eval") is wrapped when the loop imports it, read apart as the evaluation phase, and the run ends after
    the evaluation that follows the 3rd optimizer step (not at that step)."""
    from vramtune.core.records import Budget, Device
    from vramtune.core.verification import ToolRun
    from vramtune.probing.runner import run_tool

    (tmp_path / "loop.py").write_text(KIT_LOOP)
    (tmp_path / "program.py").write_text(KIT_EVAL)
    run = ToolRun("a kit's loop", [sys.executable, "loop.py"], str(tmp_path),
                  {"VRAMTUNE_VERIFY_STEPS": "3", "VRAMTUNE_VERIFY_EVALUATE": "program:eval"}, eval_batch=4)
    outcome, figures = run_tool(run, Device("cpu", 0, "cpu", 64 * 2**30, "3"), Budget(2**30, 0.05), 300)
    assert outcome.returncode == 0, outcome.stderr_tail
    assert (figures["steps"], figures["evaluations"], figures["eval_steps"]) == (3, 1, None), figures
    assert figures["eval_peak_bytes"] - 16 * 2**20 >= figures["peak_bytes"] // 2, figures  # its 16 MiB, apart
    assert figures["peak_bytes"] < 16 * 2**20 < figures["eval_peak_bytes"], figures
