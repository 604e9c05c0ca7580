"""`vramtune estimate` with the probes' vocabulary reduced (issue 27): the tiny Llama with an 8000-entry vocabulary,
probed at 500 entries (the logits' bytes per entry between 500 and 1000; with the layers recomputed, doubled until the
logits set the peak) and scaled back, against the same estimate probed at the whole vocabulary and
against a probe of the whole model."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import SPECS, needs_paddlenlp

from vramtune.estimating import prober

pytestmark = [pytest.mark.paddle, needs_paddlenlp]


@pytest.fixture
def large_vocabulary(tmp_path, monkeypatch):
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    config = tmp_path / "tiny-llama" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "vocab_size": 8000}))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "per_device_train_batch_size": 8,
                                "max_length": 256, "device": "cpu"}))
    return path


def estimated(cli, path) -> dict:
    code, out, err = cli("estimate", path, "--card", "1GiB", "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow(17)
def test_logits_probed_at_a_sixteenth_of_the_vocabulary_scale_back_to_the_whole_models_peak(cli, large_vocabulary,
                                                                                          monkeypatch):
    whole = estimated(cli, large_vocabulary)  # 256 x 8000 fp32 logits: 8 MiB a sample, under LARGE_LOGITS
    assert not any("vocabulary" in note for note in whole["notes"])
    monkeypatch.setattr(prober, "LARGE_LOGITS", 1 << 20)
    reduced = estimated(cli, large_vocabulary)
    probed = [(p["probe"]["depth"], p["probe"]["micro_batch"], p["probe"]["recomputed"], p["probe"]["vocab"])
              for p in reduced["probe_log"]]
    # the recompute probes straight at a raised vocabulary (here depth 3's raised again, to the whole vocabulary:
    # at 4,724 its peak did not pass the plain probe's), none at 500
    assert sorted(p for p in probed if not p[2]) == [(1, 1, 0, 500), (1, 1, 0, 1000), (1, 2, 0, 500), (2, 1, 0, 500)]
    assert {p[:3] for p in probed if p[2]} == {(2, 1, 2), (3, 1, 3)} and all(p[3] > 1000 for p in probed if p[2])
    note = next(note for note in reduced["notes"] if "vocabulary" in note)
    assert note.startswith("the probes' vocabulary was 500 of 8,000 entries"), note
    for mine, theirs in zip(reduced["rows"], whole["rows"], strict=True):
        assert mine["peak_bytes"] == pytest.approx(theirs["peak_bytes"], rel=0.01), (mine, theirs)
    code, out, err = cli("measure", large_vocabulary, "--micro-batch", 8, "--budget", "1GiB", "--json")
    assert code == 0, err
    predicted = next(r for r in reduced["rows"] if r["precision"] == "fp32" and r["micro_batch"] == 8
                     and r["recomputed_blocks"] == 0)
    assert predicted["peak_bytes"] == pytest.approx(json.loads(out)["peak_bytes"], rel=0.03)
