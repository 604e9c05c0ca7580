"""The parent side of a verification run (issue 36), without Paddle: the child's environment on a CPU and on a
GPU-shaped device (the card the probes ran on, capped at the budget as a probe is; the hook first on PYTHONPATH), and
what a run's outcome becomes: its peak judged against the budget, an out-of-memory error over the budget, a timeout
or another error a failure with its last line."""
from __future__ import annotations

import dataclasses

from vramtune.core.records import Budget, Device
from vramtune.core.verification import ToolRun
from vramtune.probing.runner import VERIFY_HOOK, ChildOutcome, verified, verify_env

MiB = 2**20
RUN = ToolRun("PaddleFormers' workflow", ["python", "-m", "paddleformers.cli.launcher", "train", "t.yaml"], "/w",
              {"VRAMTUNE_VERIFY_TRAINER": "paddleformers.trainer", "PYTHONPATH": "/mine"}, ["run with fp32"])
BUDGET = Budget(100 * MiB, 0.05)  # limit 95 MiB


def test_the_cpu_child_has_the_hook_first_and_writes_where_it_is_told(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/theirs")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = verify_env(RUN, Device("cpu", 0, "cpu", 64 * 2**30, "3.3.1"), BUDGET, "/tmp/x/peak.json")
    assert env["PYTHONPATH"] == f"{VERIFY_HOOK}:/mine:/theirs"
    assert (env["VRAMTUNE_VERIFY_OUT"], env["VRAMTUNE_VERIFY_DEVICE"], env["VRAMTUNE_VERIFY_TRAINER"]) == (
        "/tmp/x/peak.json", "cpu", "paddleformers.trainer")
    assert "CUDA_VISIBLE_DEVICES" not in env and "FLAGS_gpu_memory_limit_mb" not in env
    assert (VERIFY_HOOK / "sitecustomize.py").is_file() and not (VERIFY_HOOK / "__init__.py").exists()


def test_the_gpu_child_sees_the_probes_card_alone_capped_at_the_budget(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    card = Device("gpu", 1, "NVIDIA A100-SXM4-40GB", 40 * 2**30, "3.3.1", count=3)
    env = verify_env(RUN, card, BUDGET, "/tmp/x/peak.json")
    assert (env["CUDA_VISIBLE_DEVICES"], env["VRAMTUNE_VERIFY_DEVICE"], env["FLAGS_gpu_memory_limit_mb"]) == (
        "5", "gpu:0", "100")


def test_a_runs_outcome_judged_against_the_budget():
    fits = verified(RUN, ChildOutcome(0, False, "", 20.0), {"peak_bytes": 90 * MiB, "steps": 3, "stubbed": []},
                    BUDGET, 900)
    assert (fits.status, fits.peak_bytes, fits.steps, fits.notes) == ("fits", 90 * MiB, 3, ["run with fp32"])
    reserved = verified(RUN, ChildOutcome(0, False, "", 20.0), {"peak_bytes": 90 * MiB, "reserved_bytes": 96 * MiB,
                                                                 "stubbed": ["paddle.device.synchronize"]}, BUDGET, 900)
    assert (reserved.status, reserved.peak_bytes) == ("over_budget", 96 * MiB)  # a GPU's reserved bytes must fit
    assert reserved.notes[-1] == "paddle.device.synchronize stubbed (a no-op on a CPU, which has no queue to wait for)"
    oom = verified(RUN, ChildOutcome(1, False, "Traceback ...\nMemoryError: (ResourceExhausted) Out of memory error on "
                                              "GPU 0. Cannot allocate 1.0 GB memory", 5.0), {}, BUDGET, 900)
    assert (oom.status, oom.peak_bytes) == ("over_budget", None)
    assert oom.error.startswith("MemoryError: (ResourceExhausted) Out of memory")
    failed = verified(RUN, ChildOutcome(1, False, "Traceback ...\nFileNotFoundError: ./data/train.jsonl", 5.0), {},
                      BUDGET, 900)
    assert (failed.status, failed.error) == ("failed", "FileNotFoundError: ./data/train.jsonl")
    hung = verified(RUN, ChildOutcome(None, True, "", 900.0), {}, BUDGET, 900)
    assert (hung.status, hung.error) == ("failed", "timed out after 900s")


def test_a_run_that_evaluates_is_judged_on_the_larger_phase_and_says_what_it_could_not_read():
    """The evaluation's peak apart from training's (the hook's figures): the larger must fit; Paddle 2.6 (no reset)
    said; an evaluation asked for that did not come, and an error raised in it, said."""
    run = dataclasses.replace(RUN, eval_batch=8, notes=[])
    done = ChildOutcome(0, False, "", 20.0)
    over = verified(run, done, {"peak_bytes": 80 * MiB, "eval_peak_bytes": 96 * MiB, "eval_steps": 3, "resets": True},
                    BUDGET, 900)
    assert (over.status, over.peak_bytes, over.eval_peak_bytes, over.eval_batch, over.eval_steps, over.notes) == (
        "over_budget", 80 * MiB, 96 * MiB, 8, 3, [])
    assert over.to_json()["evaluation"] == {"batch": 8, "peak_bytes": 96 * MiB, "probe_bytes": None, "ratio": None,
                                            "steps": 3}
    old = verified(run, done, {"peak_bytes": 80 * MiB, "eval_peak_bytes": 90 * MiB, "resets": False}, BUDGET, 900)
    assert old.status == "fits" and old.notes == [
        "Paddle cannot reset its peak counter here (2.6): the evaluation's peak is the run's up to its end, the "
        "training's the run's before it"]
    none = verified(run, done, {"peak_bytes": 80 * MiB, "resets": True}, BUDGET, 900)
    assert (none.status, none.eval_peak_bytes, none.notes) == ("fits", None, [
        "the file evaluates, but no evaluation ran within the bounded run: training alone verified"])
    raised = verified(run, ChildOutcome(1, False, "Traceback ...\nNameError: name 'GPTModel' is not defined", 9.0),
                      {"peak_bytes": 80 * MiB, "raised_in": "evaluation"}, BUDGET, 900)
    assert (raised.status, raised.error) == ("failed", "NameError: name 'GPTModel' is not defined (in its evaluation "
                                                       "pass)")
    assert verified(RUN, done, {"peak_bytes": 80 * MiB}, BUDGET, 900).to_json()["evaluation"] is None
    cpu = Device("cpu", 0, "cpu", 64 * 2**30, "3.3.1")  # the hook waits for the evaluation after the last step
    assert verify_env(run, cpu, BUDGET, "/x")["VRAMTUNE_VERIFY_EVALUATES"] == "1"
    assert "VRAMTUNE_VERIFY_EVALUATES" not in verify_env(RUN, cpu, BUDGET, "/x")
