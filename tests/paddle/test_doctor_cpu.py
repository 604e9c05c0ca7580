"""vramtune doctor on this CPU for real (Paddle 3.x and 2.6): the checks that apply run in their own children and
measure; the GPU-only ones are skipped with the reason; a child that cannot run fails its check with its error."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import HUNG

from vramtune.core.records import Device
from vramtune.doctor.base import device_arg
from vramtune.doctor.battery import run_check
from vramtune.doctor.checks import by_name
from vramtune.doctor.recompute import native_skip
from vramtune.doctor.running import ChildChecks

pytestmark = pytest.mark.paddle
MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


PARENT = textwrap.dedent("""
    import json, sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("paddle", "paddlenlp", "paddleformers"):
                raise ImportError("blocked: " + name)

    sys.meta_path.insert(0, Block())
    from typer.testing import CliRunner
    from vramtune.cli import app

    result = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--json"], catch_exceptions=False)
    imported = any(name.split(".")[0] == "paddle" for name in sys.modules)
    print(json.dumps({"code": result.exit_code, "out": result.stdout, "err": result.stderr, "paddle": imported}))
""")


@pytest.mark.slow(15)
def test_doctor_on_this_cpu_measures_what_applies_and_saves_it(private_cache):
    """The whole command, its parent with Paddle blocked: only the checks' children import it."""
    done = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=HUNG, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    code, out, err = ran["code"], ran["out"], ran["err"]
    result = json.loads(out)
    assert (code, ran["paddle"]) == (0, False), err  # the parent never imported Paddle
    checks = {c["name"]: c for c in result["checks"]}
    assert {name: c["status"] for name, c in checks.items()} == {
        "device": "pass", "counters": "pass", "budget": "skip", "amp": "pass", "recompute": "pass", "ranks": "skip",
        "allocator": "skip"}
    assert result["device"]["kind"] == "cpu"
    counters = checks["counters"]["figures"][""]
    assert counters["peak_allocated"] - counters["before"] >= counters["size"] == 64 * MiB
    assert counters["peak_reserved"] is None  # the host has no pool
    if counters["resets"]:  # Paddle 3.x: the peak restarts from what is in use
        assert counters["after_reset"] < counters["before"] + counters["size"]
    else:  # Paddle 2.6: a fresh process starts near zero
        assert counters["fresh_peak"] <= 16 * MiB
    amp = checks["amp"]
    assert amp["figure"].startswith("auto_cast changes nothing here: under fp16 and bf16 a matmul's output stays "
                                    "float32")
    assert all(f["o1_matmul"] == f["o2_weight"] == "float32" for f in amp["figures"]["dtypes"].values())
    recompute = checks["recompute"]["figures"]
    for pair in recompute.values():  # vramtune's wrapper; PaddleFormers' (3.3.1) or PaddleNLP's (2.6) own
        plain, recomputed = pair["plain"], pair["recomputed"]
        assert plain["base"] == recomputed["base"]  # the same weights and optimizer state
        assert 0 < recomputed["activations"] < 0.8 * plain["activations"]
    native = native_skip(Device.from_json(result["device"]))  # Paddle 3.3.1: PaddleFormers'; 2.6: PaddleNLP's
    assert list(recompute) == ["wrapper"] + ([] if native else ["native"])
    for name in ("device", "counters", "amp", "recompute"):
        assert checks[name]["seconds"] > 0
        assert f"pass  {name:9}  " in err
    (path,) = private_cache.glob("doctor/cpu-*.json")
    assert json.loads(path.read_text())["checks"] == result["checks"]


def test_a_check_whose_child_cannot_run_fails_with_the_childs_error():
    """The counters check aimed at a GPU this Paddle does not have: the child raises, the check fails saying so."""
    card = Device("gpu", 0, "no such card", 16 << 30, "x")
    result = run_check(by_name()["counters"], card, ChildChecks())
    assert result.status == "fail"
    assert result.figure.startswith("the check's child ended crashed: ") and "Error" in result.figure
    assert result.meaning == "vramtune cannot run this on the device: see the error"


def test_the_device_check_on_a_missing_gpu_fails_with_paddles_answer():
    run = ChildChecks().run(by_name()["device"], "gpu", "", {}, 120)
    verdict = by_name()["device"].judge({"": run}, None)
    assert run.status == "measured" and verdict.status == "fail"
    assert verdict.figure.startswith("this Paddle build sees no GPU (paddle ")


@pytest.mark.slow(10)
def test_the_gpu_checks_child_code_runs_on_cpu_as_far_as_paddle_lets_it():
    """The GPU-only parts, aimed at the CPU: every Paddle call they make exists in this Paddle (GradScaler, decorate,
    the allocator flag) and measures, with the CPU's answers (the scaler is disabled there, AMP a no-op)."""
    cpu = Device("cpu", 0, "cpu", 16 << 30, "x")
    checks = ChildChecks()
    scaler = checks.run(by_name()["amp"], device_arg(cpu), "scaler", {}, 300)
    assert scaler.status == "measured", scaler.error
    assert (scaler.figures["enabled"], scaler.figures["finite_step_updated"]) == (False, True)
    for part in ("fp32", "fp16-O1", "bf16-O2"):
        run = checks.run(by_name()["amp"], device_arg(cpu), part, {}, 300)
        assert run.status == "measured" and run.figures["activations"] > 16 * MiB, (part, run.error)
    allocator = checks.run(by_name()["allocator"], device_arg(cpu), "", {}, 300)
    assert allocator.status == "measured" and allocator.figures["strategy"] == "auto_growth", allocator.error
