"""Evaluation as a phase of the run: its spec keys and the judgement that both phases must fit (no Paddle)."""
from __future__ import annotations

import json
import shutil

from conftest import SPECS, mlp_spec

from vramtune.core.records import Budget, ProbeResult
from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.dialects.paddlenlp.export import tuned_arguments
from vramtune.plugins import MECHANISMS
from vramtune.render.words import chosen_lines
from vramtune.spec import load_spec


def test_yaml_and_arguments_file_evaluation_settings(write_spec, tmp_path, monkeypatch):
    spec = load_spec(write_spec(mlp_spec(**{"train.evaluation": {"batch": 64, "accumulation_steps": 4}})))
    settings = spec.settings["evaluation"]
    assert (settings.batch, settings.keep, settings.accumulation_steps) == (64, "logits", 4)
    assert load_spec(write_spec(mlp_spec())).settings["evaluation"] is None  # no evaluation unless asked
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "args.json"
    for keys, expected in (({"do_eval": True}, (8, "predictions")), ({"evaluation_strategy": "epoch"}, (8, "predictions")),
                           ({"do_eval": True, "per_device_eval_batch_size": 32, "prediction_loss_only": True},
                            (32, "loss")), ({"per_device_eval_batch_size": 32}, None)):
        path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "max_length": 64, **keys}))
        settings = load_spec(path).settings["evaluation"]
        assert (settings and (settings.batch, settings.keep)) == expected, keys


def test_bad_evaluation_settings_are_named(write_spec, cli):
    path = write_spec(mlp_spec(**{"train.evaluation": {"batch": 0, "keep": "all", "steps": 2}}))
    code, _, err = cli("validate", path)
    assert code == 2 and err.splitlines() == [
        f"error: {path}: train.evaluation.batch: must be positive, got 0",
        f"error: {path}: train.evaluation.keep: must be one of logits, predictions, loss; got 'all'",
        f"error: {path}: train.evaluation.steps: unknown key"]

PHASES = [m.judge for m in MECHANISMS]


def evaluated(training_peak: int, peaks: dict[int, int | None], chosen: int | None, steps: int | None = None,
              kept: int = 1000) -> ProbeResult:
    return ProbeResult("measured", Strategy(micro_batch=8), peak_bytes=training_peak, samples_per_sec=10.0,
                       facts={"eval_requested": 32, "eval_batch": chosen, "eval_accumulation_steps": steps,
                              "eval_peaks": {str(k): v for k, v in peaks.items()},
                              "eval_kept": {str(k): kept for k in peaks}})


def test_a_configuration_fits_only_if_both_phases_fit():
    budget = Budget(1000_000, 0.0)
    assert evaluated(900_000, {32: 990_000}, 32).judged(budget, PHASES).status == "fits"
    lowered = evaluated(900_000, {32: 1_200_000, 16: 990_000}, 16).judged(budget, PHASES)
    assert lowered.status == "fits"
    nothing = evaluated(900_000, {32: 1_200_000, 1: 1_010_000}, None).judged(budget, PHASES)
    assert (nothing.status, nothing.error) == ("over_budget", "evaluation does not fit even at batch 1: its peak "
                                                              "1010000 bytes > 1000000 bytes")
    oom = evaluated(900_000, {32: None}, None).judged(budget, PHASES)
    assert (oom.status, oom.error) == ("over_budget", "evaluation ran out of memory even at batch 32")
    # eval_accumulation_steps 4: three kept steps' buffer, copied by the concatenation, is counted with the step
    assert evaluated(900_000, {32: 990_000}, 32, steps=4, kept=2_000).judged(budget, PHASES).status == "over_budget"


def test_the_tuned_evaluation_batch_is_written_back_and_the_report_shows_both_peaks():
    result = evaluated(900_000, {32: 1_200_000, 16: 990_000}, 16)
    arguments, warnings = tuned_arguments(Tuned(Strategy(micro_batch=8), result.facts, device_kind="gpu"), "adamw")
    assert arguments["per_device_eval_batch_size"] == 16
    assert warnings == ["per_device_eval_batch_size lowered from 32 to 16: evaluation at 32 does not fit beside the "
                        "training state"]
    assert chosen_lines(result) == [
        "evaluation at batch 16 (lowered from 32: larger ones do not fit): peak 966.8 KiB with the training state "
        "resident; keeps 62 B per sample on the device for the whole evaluation set (bound it with the evaluation's "
        "accumulation steps: eval_accumulation_steps in a Trainer's arguments, train.evaluation.accumulation_steps in "
        "a spec)"]


def test_an_evaluation_that_keeps_nothing_says_so_without_advice_to_bound_it():
    assert chosen_lines(evaluated(900_000, {32: 990_000}, 32, kept=0)) == [
        "evaluation at batch 32: peak 966.8 KiB with the training state resident; keeps nothing on the device from "
        "step to step"]
