"""Spec loading: every shipped config validates; every bad spec gets its exact message and exit code 2."""
from __future__ import annotations

import json

import pytest
from bad_specs import CASES, MULTI
from conftest import CONFIGS, SPECS, mlp_spec

from vramtune.dialects.paddleformers.reading import DATA_AT_PROBE_TIME
from vramtune.spec import load_spec


def _file(write_spec, content):
    return write_spec(content if isinstance(content, str) else mlp_spec(**content))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")) + sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_specs_validate(path, cli):
    code, _, err = cli("validate", path)
    said = "" if "train_dataset_path" not in path.read_text() else f"warning: {DATA_AT_PROBE_TIME}\n"
    assert (code, err) == (0, f"{said}ok: {path}\n")  # a PaddleFormers config's data is read at probe time


@pytest.mark.parametrize("case, content, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_spec_exact_message(case, content, expected, cli, write_spec):
    path = _file(write_spec, content)
    code, out, err = cli("validate", path)
    assert code == 2
    assert err == expected.replace("F", str(path), 1) + "\n"
    assert out == ""


def test_all_problems_reported_at_once(cli, write_spec):
    path = _file(write_spec, MULTI[0])
    code, _, err = cli("validate", path)
    assert code == 2
    assert err.splitlines() == [line.replace("F", str(path), 1) for line in MULTI[1]]


def test_validate_many_files_json(cli, write_spec):
    good = CONFIGS / "mlp-python-cpu.yaml"
    bad = _file(write_spec, {"headroom": 2})
    code, out, _ = cli("validate", good, bad, "--json")
    payload = json.loads(out)
    assert code == 2 and payload["valid"] is False
    assert [f["ok"] for f in payload["files"]] == [True, False]
    assert payload["files"][1]["problems"] == [f"{bad}: headroom: must be in [0, 0.9), got 2"]


def test_missing_file(cli, tmp_path):
    code, _, err = cli("validate", tmp_path / "nope.yaml")
    assert (code, err) == (2, f"error: {tmp_path / 'nope.yaml'}: no such file\n")


def test_cli_overrides_apply_before_validation(tmp_path):
    spec = load_spec(CONFIGS / "bert-mini-cpu.yaml", {"budget": "1GiB", "train.target_batch": 8, "device": "gpu:1"})
    assert spec.budget == 2**30 and spec.train.target_batch == 8 and spec.device == "gpu:1"
    unset = load_spec(CONFIGS / "bert-mini-cpu.yaml", {"budget": None, "device": None})  # None: the spec's own
    assert unset.budget == 48 * 2**20 and unset.device == "cpu"


def test_candidate_micro_batches_respect_accumulation_limit():
    spec = load_spec(CONFIGS / "mlp-python-cpu.yaml", {"search.max_accumulation": 4})
    assert spec.micro_batches() == [2048, 1024, 512]


def test_key_value_overrides_on_a_vramtune_spec_or_arguments_file_are_refused(fake_cli, tmp_path):
    from fakes import FakeDevice

    invoke, _ = fake_cli(FakeDevice())
    arguments = tmp_path / "args.json"
    arguments.write_text(json.dumps({"model_name_or_path": "x", "output_dir": "./out"}))
    for path in (CONFIGS / "mlp-python-cpu.yaml", arguments):
        for flags in (["train.target_batch=8"], ["-O", "train.target_batch=8"]):
            code, out, err = invoke("probe", path, *flags, "--budget", "64MiB")
            assert (code, out) == (2, "")
            assert err == (f"error: {path}: KEY=VALUE overrides / -O apply to PaddleFormers and kit configs only; for "
                           "a vramtune spec or a PaddleNLP arguments file use the flags (--target-batch, --budget, "
                           "--device, --devices, ...) or edit the file\n")
