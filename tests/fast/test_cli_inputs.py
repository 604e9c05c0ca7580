"""What the commands refuse before any probe (exit 2, one message, nothing measured): output flags that contradict
each other, a model whose packages this Python cannot import; and a config's own key=value overrides, which
validate takes as probe does (Paddle-free)."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from conftest import CONFIGS, ROOT
from fakes import FakeDevice, MiB

from vramtune.estimating.answer import installed_paddle

SPEC = CONFIGS / "mlp-python-cpu.yaml"


def small():
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6)


def test_apply_refuses_the_file_and_the_json_report_both_on_stdout(fake_cli):
    cli, backend = fake_cli(small())
    code, out, err = cli("apply", SPEC, "-o", "-", "--json")
    message = ("-o - and --json both write to stdout: write the file with -o FILE (the JSON report names it), or "
               "leave out --json to get the file alone on stdout")
    assert (code, json.loads(out), backend.jobs) == (2, {"error": message, "exit_code": 2}, [])
    assert err == f"error: {message}\n"


# Each shipped NLP config's stack lives in its own environment (docs/environments.md): one of them is missing here.
NLP_CONFIGS = [("bert-mini-cpu.yaml", "paddlenlp", "nlp"), ("formers-sft-lora-cpu.yaml", "paddleformers", "formers")]


@pytest.mark.parametrize("name, package, extra", NLP_CONFIGS)
@pytest.mark.parametrize("command", [["probe"], ["apply"], ["estimate", "--card", "1GiB"], ["measure", "-m", "1"],
                                     ["check", "--budget", "1GiB"]])
def test_a_model_whose_package_is_missing_is_refused_before_any_probe(cli, monkeypatch, name, package, extra,
                                                                      command):
    """The real CLI (its probes would run this Python's children): refused before the device is even asked."""
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    if command[0] == "estimate" and package == "paddleformers":
        pytest.skip("a PaddleFormers config's estimate is counted from its sizes: nothing is built")
    monkeypatch.chdir(ROOT)  # the PaddleFormers config's paths are relative to the repository
    code, out, err = cli(*command, CONFIGS / name)
    assert (code, out) == (2, "")
    assert err == (f"error: {CONFIGS / name}: its {package} model is built with {package}, which this Python cannot "
                   f"import ({sys.executable}, Paddle {installed_paddle()}): pip install 'vramtune[{extra}]' beside a "
                   "Paddle it supports, see docs/environments.md (in a clone: .venv26 has PaddleNLP on Paddle 2.6, "
                   ".venv PaddleFormers on Paddle 3)\n")


FORMERS = CONFIGS / "formers-sft-lora-cpu.yaml"


@pytest.mark.parametrize("given", [["max_seq_len=64"], ["-O", "max_seq_len=64"]])
def test_validate_applies_a_configs_overrides_after_the_file_or_with_O(fake_cli, monkeypatch, given):
    monkeypatch.chdir(ROOT)
    cli, _ = fake_cli(small())
    code, out, err = cli("validate", FORMERS, *given, "--json")
    assert code == 0 and err.endswith(f"ok: {FORMERS}\n"), err
    code, out, err = cli("validate", FORMERS, *given[:-1], "max_seq_len=abc")
    assert (code, out) == (2, "")
    assert err == f"error: {FORMERS}: max_seq_len: must be an integer, got a string ('abc')\n"


def test_validate_refuses_overrides_where_probe_does_and_overrides_without_a_file(fake_cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    cli, _ = fake_cli(small())
    code, _, validated = cli("validate", SPEC, "train.target_batch=64")
    _, _, probed = cli("probe", SPEC, "train.target_batch=64")
    assert code == 2 and validated == probed == (
        f"error: {SPEC}: KEY=VALUE overrides / -O apply to PaddleFormers and kit configs only; for a vramtune spec or "
        "a PaddleNLP arguments file use the flags (--target-batch, --budget, --device, --devices, ...) or edit the "
        "file\n")
    code, _, err = cli("validate", "max_seq_len=64")
    assert code == 2 and err == ("error: no spec file among max_seq_len=64 (an argument with = that names no file is "
                                 "an override): vramtune validate SPEC... [KEY=VALUE]...\n")


def test_estimate_of_a_model_folder_refuses_a_configs_overrides(fake_cli):
    cli, _ = fake_cli(small())
    folder = ROOT / "tests" / "specs" / "tiny-llama"
    for given in (["max_seq_len=64"], ["-O", "max_seq_len=64"]):
        code, out, err = cli("estimate", folder, "--card", "1GiB", *given)
        assert (code, out) == (2, "")
        assert err == (f"error: {folder}: key=value overrides apply to a config of a tool (PaddleFormers, a kit); a "
                       "model folder or config.json is estimated from its sizes: --seq-len and --batch give the "
                       "run\n")


def test_plot_refuses_stdout_and_says_the_png_it_writes_for_a_name_without_suffix(fake_cli, tmp_path):
    cli, _ = fake_cli(small())
    assert cli("probe", SPEC)[0] == 0
    code, out, err = cli("plot", SPEC, "-o", "-")
    assert (code, out, err) == (2, "", "error: -o -: plot writes a PNG file, not to stdout; name the file (default "
                                       "memory.png)\n")
    code, _, err = cli("plot", SPEC, "-o", tmp_path / "chart")
    assert (code, err) == (0, f"wrote {tmp_path / 'chart.png'}\n")
    assert [path.name for path in tmp_path.glob("chart*")] == ["chart.png"]


@pytest.mark.parametrize("command", ["probe", "apply", "measure", "estimate", "plot"])
def test_usage_names_the_file_spec_and_a_configs_overrides_after_it(fake_cli, command):
    cli, _ = fake_cli(small())
    code, out, _ = cli(command, "--help")
    usage = next(line.strip() for line in out.splitlines() if "Usage:" in line)
    assert (code, usage) == (0, f"Usage: root {command} [OPTIONS] {{SPEC}} [KEY=VALUE]...")


def test_apply_refuses_an_output_file_that_is_a_kits_override_before_any_probe(fake_cli):
    cli, backend = fake_cli(small())
    code, out, err = cli("apply", SPEC, "-o", "Global.epochs=1")
    assert (code, out, err, backend.jobs) == (2, "", "error: -o Global.epochs=1: -o names the file apply writes; a "
                                                     "config's own override (a kit's -o) is -O Global.epochs=1, or "
                                                     "Global.epochs=1 after the file\n", [])
