"""`vramtune estimate` of a PaddleFormers config takes the config's own key=value overrides as probe and
paddleformers-cli train take them: after the file, or with -O, the same answer as the file edited."""
from __future__ import annotations

import json

import pytest
import yaml
from conftest import CONFIGS, ROOT, needs_paddleformers

pytestmark = [pytest.mark.paddle, needs_paddleformers]

FORMERS = CONFIGS / "formers-sft-lora-cpu.yaml"


def answer(cli, path, *given) -> dict:
    code, out, err = cli("estimate", path, "--card", "1GiB", "--json", *given)
    assert code == 0, err
    return {key: value for key, value in json.loads(out).items() if key != "seconds"}


def test_an_override_is_the_file_edited(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository
    edited = tmp_path / "sft.yaml"
    edited.write_text(yaml.safe_dump({**yaml.safe_load(FORMERS.read_text()), "max_seq_len": 64}))
    expected = answer(cli, edited)
    assert expected["seq_len"] < answer(cli, FORMERS)["seq_len"]  # the override changes the answer
    assert answer(cli, FORMERS, "max_seq_len=64") == expected
    assert answer(cli, FORMERS, "-O", "max_seq_len=64") == expected
