"""Under --json a failure is one JSON object on stdout, {"error": ..., "exit_code": ...}, the message stderr says
too: bad input (2), the command line's own usage errors (2), nothing fits apply (1), an interrupt (130), a bug (3).
Without --json stdout stays empty."""
from __future__ import annotations

import json
import os

import pytest
from conftest import CONFIGS
from fakes import FakeDevice, MiB

SPEC = CONFIGS / "mlp-python-cpu.yaml"  # budget 40 MiB


def small():
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6)


BAD_INPUT = [
    (["probe", SPEC, "--budget", "12"], f"{SPEC}: budget: '12' has no unit, so it is bytes, too few for any model: "
                                        "write 12GiB or 12MiB (12B if bytes are meant) (or 'auto' on a GPU)"),
    (["apply", SPEC, "--device", "tpu"], f"{SPEC}: device: must be auto, cpu, gpu or gpu:N, got 'tpu'"),
    (["check", SPEC, "--tolerance", "-1"], f"{SPEC}: --tolerance: must be 0 or more, got -1.0"),
    (["estimate", SPEC, "--card", "12x"], f"{SPEC}: --card: unknown unit 'x' in '12x' (use B, KiB, MiB, GiB, TiB, "
                                          "KB, MB, GB, TB)"),
    (["measure", SPEC], f"{SPEC}: --micro-batch: is required"),
    (["validate", "x=1"], "no spec file among x=1 (an argument with = that names no file is an override): vramtune "
                          "validate SPEC... [KEY=VALUE]..."),
    (["probe", "missing.yaml"], "missing.yaml: no such file"),
    (["check", SPEC], f"{SPEC}: tuned: is missing: `vramtune apply SPEC.yaml` writes it into SPEC.tuned.yaml (a "
                      "vramtune spec): give that file; a PaddleFormers, PaddleNLP or kit file has no tuned: section and "
                      "is checked as it is: `vramtune check FILE --budget B` (exit 1 when it no longer fits)"),
    (["probe", SPEC, "--budget", "4", "MiB"], "'MiB' after the file is a unit on its own: write a size without a "
                                              "space (e.g. --budget 512MiB, not --budget 512 MiB)"),
    (["estimate", SPEC, "--card", "24", "GB"], "'GB' after the file is a unit on its own: write a size without a "
                                               "space (e.g. --budget 512GB, not --budget 512 GB)"),
]


@pytest.mark.parametrize("args, message", BAD_INPUT, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_bad_input_is_a_json_object_on_stdout_and_the_message_on_stderr(fake_cli, args, message):
    cli, backend = fake_cli(small())
    code, out, err = cli(*args, "--json")
    assert (code, json.loads(out), err, backend.jobs) == (2, {"error": message, "exit_code": 2},
                                                          f"error: {message}\n", [])
    code, out, err = cli(*args)
    assert (code, out, err) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize("args, message", [
    (["probe", SPEC, "--target-batch", "abc"], "Invalid value for '--target-batch': Input should be a valid integer, "
                                               "unable to parse string as an integer"),
    (["estimate", SPEC], "Missing option '--card'."),
    (["check"], "Missing argument 'FILE'."),
    (["probe"], "Missing argument 'SPEC'."),
    (["apply", SPEC, "--no-such-flag"], "No such option: --no-such-flag"),
])
def test_a_usage_error_is_a_json_object_too(fake_cli, args, message):
    cli, _ = fake_cli(small())
    code, out, err = cli(*args, "--json")
    assert (code, json.loads(out)) == (2, {"error": message, "exit_code": 2})
    assert "Usage: " in err
    code, out, _ = cli(*args)
    assert (code, out) == (2, "")


def test_a_command_without_json_prints_no_json_for_it(fake_cli):
    cli, _ = fake_cli(small())
    code, out, err = cli("plot", SPEC, "--json")
    assert (code, out) == (2, "") and "No such option: --json" in err


def test_apply_when_nothing_fits_exit_1(fake_cli):
    cli, _ = fake_cli(FakeDevice(fixed=60 * MiB, per_sample=MiB / 20, saved=0, blocks=6))
    code, out, err = cli("apply", SPEC, "--json")
    message = f"nothing fits mlp-python-cpu within the budget; see `vramtune probe {SPEC}`"
    assert (code, json.loads(out)) == (1, {"error": message, "exit_code": 1})
    assert err.endswith(f"error: {message}\n")
    code, _, err = cli("apply", SPEC, "--budget", "50MiB", "--target-batch", "32")  # the probe to see is this one
    assert (code, err.splitlines()[-1]) == (1, "error: nothing fits mlp-python-cpu within the budget; see `vramtune "
                                               f"probe {SPEC} --budget 50MiB --target-batch 32`")


@pytest.mark.parametrize("raised, exit_code, said", [
    (KeyboardInterrupt(), 130, "interrupted before anything was written: the finished probes are saved; run again to "
                               "resume"),
    (ZeroDivisionError("a bug"), 3, "internal error: ZeroDivisionError: a bug (traceback in "),
])
def test_apply_interrupted_or_broken_while_probing(fake_cli, tmp_path, raised, exit_code, said):
    device = small()
    cli, _ = fake_cli(device)

    def failing(s, budget):
        raise raised
    device.result = failing
    code, out, err = cli("apply", SPEC, "-o", tmp_path / "tuned.yaml", "--json")
    failure = json.loads(out)
    assert (code, failure["exit_code"]) == (exit_code, exit_code) and failure["error"].startswith(said)
    assert err.endswith(f"error: {failure['error']}\n") and not (tmp_path / "tuned.yaml").exists()
    if exit_code == 3:  # the message names the file holding the traceback
        os.unlink(failure["error"].split("traceback in ")[1].split(";")[0])
