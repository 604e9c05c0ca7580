"""What the commands refuse before any probe (exit 2, one message, nothing measured): output flags that contradict
each other, a model whose packages this Python cannot import."""
from __future__ import annotations

import importlib.util
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
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == ("error: -o - and --json both write to stdout: write the file with -o FILE (the JSON report names "
                   "it), or leave out --json to get the file alone on stdout\n")


# Each shipped NLP config's stack lives in its own environment (docs/environments.md): one of them is missing here.
NLP_CONFIGS = [("bert-mini-cpu.yaml", "paddlenlp", "nlp"), ("formers-sft-lora-cpu.yaml", "paddleformers", "formers")]


@pytest.mark.parametrize("name, package, extra", NLP_CONFIGS)
@pytest.mark.parametrize("command", [["probe"], ["apply"], ["measure", "-m", "4"], ["estimate", "--card", "1GiB"]])
def test_a_model_whose_package_is_missing_is_refused_before_any_probe(fake_cli, monkeypatch, name, package, extra,
                                                                      command):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    if command[0] == "estimate" and package == "paddleformers":
        pytest.skip("a PaddleFormers config's estimate is counted from its sizes: nothing is built")
    monkeypatch.chdir(ROOT)  # the PaddleFormers config's paths are relative to the repository
    cli, backend = fake_cli(small())
    code, out, err = cli(*command, CONFIGS / name)
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == (f"error: {CONFIGS / name}: its {package} model is built with {package}, which this Python cannot "
                   f"import ({sys.executable}, Paddle {installed_paddle()}): pip install 'vramtune[{extra}]' beside a "
                   "Paddle it supports, see docs/environments.md (in a clone: .venv26 has PaddleNLP on Paddle 2.6, "
                   ".venv PaddleFormers on Paddle 3)\n")


def test_plot_builds_nothing_so_a_missing_package_is_not_its_concern(fake_cli):
    if importlib.util.find_spec("paddlenlp") is not None:
        pytest.skip("paddlenlp is installed here")
    cli, _ = fake_cli(small())
    code, _, err = cli("plot", CONFIGS / "bert-mini-cpu.yaml")
    assert code == 2 and err.startswith("error: no saved results for bert-mini-cpu")
