"""`vramtune estimate` with the probes at shorter sequences (issue 27): the tiny Llama (8,000-entry vocabulary) at
sequence 1024, each probe without recompute run at 64 to 384 tokens, fitted as c + a s + b s^2 and extrapolated,
against the same estimate probed at the whole sequence: every probe's activations and every row's peak."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import SPECS, needs_paddlenlp

from vramtune.estimating import prober

pytestmark = [pytest.mark.paddle, needs_paddlenlp]

SEQ = 1024
TOLERANCE = 1e-4  # sequence.CHECK_TOLERANCE: the fit is exact to the byte on Llama's shapes, this is the check's


def tiny_llama(folder: Path, config: dict[str, Any], arguments: dict[str, Any]) -> Path:
    """The tiny Llama at sequence SEQ in `folder` with `config` over its config.json, and its arguments file (4
    samples a step on CPU, and `arguments`)."""
    shutil.copytree(SPECS / "tiny-llama", folder / "tiny-llama")
    model = folder / "tiny-llama" / "config.json"
    model.write_text(json.dumps({**json.loads(model.read_text()), "max_position_embeddings": SEQ, **config}))
    path = folder / "args.json"
    path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "per_device_train_batch_size": 4,
                                "max_length": SEQ, "device": "cpu", **arguments}))
    return path


@pytest.fixture
def long_sequence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tiny_llama(tmp_path, {"vocab_size": 8000}, {})


def estimated(cli, path) -> dict:
    code, out, err = cli("estimate", path, "--card", "1GiB", "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow(24)
def test_probes_at_shorter_sequences_extrapolate_to_the_probe_at_the_whole_sequence(cli, long_sequence,
                                                                                   monkeypatch):
    shorter = estimated(cli, long_sequence)
    # every probe without recompute at 64, 128, 192 checked at 256, where 64 sits on a floor (the 8,000-entry
    # vocabulary's build) again at 128, 192, 256 checked at 384; with every layer recomputed at the whole sequence
    assert {p["probe"]["seq"] for p in shorter["probe_log"] if not p["probe"]["recomputed"]} == {64, 128, 192, 256, 384}
    assert {p["probe"]["seq"] for p in shorter["probe_log"] if p["probe"]["recomputed"]} == {None}
    note = next(note for note in shorter["notes"] if "shorter sequences" in note)
    assert "through 64, 128, 192 checked at 256; where it missed" in note and "whole sequence" not in note, note
    monkeypatch.setattr(prober, "probe_sequences", lambda seq: None)
    whole = estimated(cli, long_sequence)
    assert {p["probe"]["seq"] for p in whole["probe_log"]} == {None}
    probed = {tuple(p["probe"][k] for k in ("depth", "micro_batch", "recomputed", "vocab")): p["activations"]
              for p in whole["probe_log"]}
    fits = shorter["sequence_fits"]
    assert len(fits) == 3  # depth 1 at 1 and 2 samples, depth 2
    for fit in fits:
        key = tuple(fit["probe"][k] for k in ("depth", "micro_batch", "recomputed", "vocab"))
        c, a, b = fit["constant"], fit["linear"], fit["square"]
        assert c + a * SEQ + b * SEQ * SEQ == pytest.approx(probed[key], rel=TOLERANCE), (key, fit)
    for mine, theirs in zip(shorter["rows"], whole["rows"], strict=True):
        assert mine["peak_bytes"] == pytest.approx(theirs["peak_bytes"], rel=TOLERANCE), (mine, theirs)
    assert shorter["best"] == whole["best"]


@pytest.fixture
def wide_lora(tmp_path, monkeypatch):
    """A Llama shaped like the large ones' probes (LoRA; 32,768 entries: logits large enough for a reduced
    vocabulary), small enough for a test: a tiny Llama's own shape sets its peaks with transients instead."""
    monkeypatch.chdir(tmp_path)
    return tiny_llama(tmp_path, {"hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
                                 "vocab_size": 32768}, {"lora": True, "lora_rank": 8})


def wide_lora_estimate(cli, wide_lora, once) -> dict:
    """The wide LoRA Llama's estimate as vramtune makes it: two tests read it, it is made once in the run."""
    return once("wide-lora-estimate", lambda: estimated(cli, wide_lora))


@pytest.mark.slow(40)
def test_a_deeper_recompute_probe_is_the_shallower_one_plus_the_layers_kept_at_the_probes_vocabulary(
        cli, wide_lora, monkeypatch, once):
    """With the vocabulary reduced (2,048 of 32,768 entries), the depth-3 recompute probe is not run at the raised
    vocabulary and the whole sequence: depth 2's there plus what the third layer keeps, measured at 2,048 entries
    and shorter sequences; against the same estimate with depth 3 probed."""
    derived = wide_lora_estimate(cli, wide_lora, once)
    recomputed = {(p["probe"]["depth"], p["probe"]["vocab"], p["probe"]["seq"])
                  for p in derived["probe_log"] if p["probe"]["recomputed"]}
    raised = {vocab for _, vocab, _ in recomputed if vocab != 2048}
    assert len(raised) == 1 and raised.pop() > 4096
    assert {(depth, seq) for depth, vocab, seq in recomputed if vocab != 2048} == {(2, None)}
    assert {(depth, seq) for depth, vocab, seq in recomputed if vocab == 2048} == {
        (depth, seq) for depth in (2, 3) for seq in (64, 128, 192)}
    monkeypatch.setattr(prober.Prober, "layers_kept", lambda *args, **kwargs: None)
    probed = estimated(cli, wide_lora)
    assert {(p["probe"]["depth"], p["probe"]["seq"]) for p in probed["probe_log"] if p["probe"]["recomputed"]
            and p["probe"]["vocab"] != 2048} == {(2, None), (3, None)}
    mine, theirs = ([p for p in answer["activation_fit"]["points"] if p.get("recomputed")]
                    for answer in (derived, probed))
    assert [p["depth"] for p in mine] == [p["depth"] for p in theirs] == [2, 3]
    for one, other in zip(mine, theirs):
        assert one["activations"] == pytest.approx(other["activations"], rel=TOLERANCE), (mine, theirs)
    for one, other in zip(derived["rows"], probed["rows"], strict=True):
        assert one["peak_bytes"] == pytest.approx(other["peak_bytes"], rel=TOLERANCE), (one, other)
    assert derived["best"] == probed["best"]


@pytest.mark.slow(12)
def test_where_what_a_layer_keeps_misses_its_fit_the_deeper_probe_runs_at_the_raised_vocabulary(
        cli, long_sequence, monkeypatch):
    """The tiny Llama (128 wide) with its vocabulary reduced to 500: its depth-3 recompute probe at 500 entries misses
    its fit at 64 to 256 tokens (transients, not the layers, set its peaks), so depth 3 is probed at the raised
    vocabulary and the whole sequence, and nothing more at 500 entries: the first rung only."""
    monkeypatch.setattr(prober, "LARGE_LOGITS", 1 << 20)
    answer = estimated(cli, long_sequence)
    recomputed = {(p["probe"]["depth"], p["probe"]["vocab"], p["probe"]["seq"])
                  for p in answer["probe_log"] if p["probe"]["recomputed"]}
    assert {(depth, seq) for depth, vocab, seq in recomputed if vocab != 500} == {(2, None), (3, None)}
    assert {(depth, seq) for depth, vocab, seq in recomputed if vocab == 500} == {
        (depth, seq) for depth in (2, 3) for seq in (64, 128, 192)}


@pytest.mark.slow(25)  # the estimate it shares with the test above, and one more
def test_a_recompute_probe_at_a_raised_vocabulary_ends_where_backward_first_rebuilds_a_layer(cli, wide_lora,
                                                                                              monkeypatch, once):
    """The logits set its peak before backward rebuilds a layer (its peak must pass the plain probe's, which no
    rebuilt moment passes): the step ends there, with the same peak to the byte as the whole step's."""
    def raised(answer: dict) -> list[dict]:
        return [p for p in answer["probe_log"] if p["probe"]["recomputed"] and p["probe"]["vocab"] > 4096]

    early = wide_lora_estimate(cli, wide_lora, once)
    monkeypatch.setattr(prober.Prober, "until_rebuild", lambda self, key: False)
    whole = estimated(cli, wide_lora)
    assert [("until_rebuild" in p["phases"], "steps" in p["phases"]) for p in raised(early)] == [(True, False)]
    assert [("until_rebuild" in p["phases"], "steps" in p["phases"]) for p in raised(whole)] == [(False, True)]
    assert [p["activations"] for p in raised(early)] == [p["activations"] for p in raised(whole)]
    assert [r["peak_bytes"] for r in early["rows"]] == [r["peak_bytes"] for r in whole["rows"]]
