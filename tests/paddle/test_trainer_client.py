"""The real client: what vramtune exports for a PaddleNLP arguments file runs through PaddleNLP's own Trainer
(tests/clients/trainer_run.py, a script of the kind the llm scripts are) and peaks where vramtune measured.

The axes (issue 36): accumulation 1, 2 and 8, with and without evaluation, LoRA and full, each within the band
(tests/band.py). Beside the probe's step the Trainer holds what its DataLoaders read ahead: 5 batches each on a CPU
without workers (Paddle 2.6's defaults, whatever the accumulation), which the probe holds too."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from band import assert_in_band
from conftest import HUNG, ROOT, SPECS, needs_paddlenlp

pytestmark = [pytest.mark.paddle, needs_paddlenlp]

RUNNER = ROOT / "tests" / "clients" / "trainer_run.py"


def arguments_file(tmp_path, model: str, **keys) -> tuple:
    shutil.copytree(SPECS / model, tmp_path / model)
    arguments = {"model_name_or_path": f"./{model}", "output_dir": "./checkpoints", "learning_rate": 3e-5,
                 "per_device_train_batch_size": 16, "gradient_accumulation_steps": 1, "max_length": 256,
                 "warmup_steps": 10, "seed": 7, **keys}
    path = tmp_path / "args.json"
    path.write_text(json.dumps(arguments, indent=2))
    return path, arguments


def tune(cli, path, *flags):
    out = path.with_name("tuned.json")
    code, stdout, err = cli("apply", path, "--device", "cpu", "-o", out, "--json", *flags)
    assert code == 0, err
    return out, json.loads(stdout)["chosen"]


# The least search that still chooses what a test trains (the rungs themselves: tests/paddle/test_probe.py):
# accumulation up to the target batch's 4 steps, no recompute; m=16 does not fit, m=4 x 4 does, and nothing else fits
# to be chosen by CPU timing (the whole ladder measured 9 probes, 84 CPU seconds; this, 2)
ACCUMULATION_ONLY = ("--max-accumulation", "4", "--no-recompute")


def trainer_peak(path, cwd) -> dict:
    done = subprocess.run([sys.executable, str(RUNNER), str(path)], capture_output=True, text=True, cwd=cwd,
                          timeout=HUNG)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow(30)
def test_llama_arguments_file_probe_apply_and_the_trainer_peaks_as_measured(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, original = arguments_file(tmp_path, "tiny-llama")
    code, out, err = cli("probe", path, "--device", "cpu", "--budget", "120MiB", "--json", *ACCUMULATION_ONLY)
    assert code == 0, err
    assert json.loads(out)["chosen"]["peak_bytes"] <= 120 * 2**20 * 0.95
    tuned_path, chosen = tune(cli, path, "--budget", "120MiB", *ACCUMULATION_ONLY)
    tuned = json.loads(tuned_path.read_text())
    assert set(original) <= set(tuned)  # every key kept
    assert {k: v for k, v in tuned.items() if k in original and k not in ("per_device_train_batch_size",
            "gradient_accumulation_steps")} == {k: v for k, v in original.items() if k not in (
            "per_device_train_batch_size", "gradient_accumulation_steps")}
    assert tuned["per_device_train_batch_size"] * tuned["gradient_accumulation_steps"] == 16
    assert (tuned["per_device_train_batch_size"], tuned["device"], tuned["do_train"]) == (chosen["micro_batch"], "cpu",
                                                                                          True)
    measured = trainer_peak(tuned_path, tmp_path)
    assert_in_band(chosen["peak_bytes"], measured["peak_bytes"])


@pytest.mark.slow(84)
def test_llama_partial_recompute_exports_no_recompute_layers_the_trainer_reproduces(cli, tmp_path, monkeypatch,
                                                                                   steady_speed):
    """Partial and full recompute both fit; which is faster is CPU timing (under load the search chose all 4
    blocks): steady_speed takes timing out, so the least recompute that fits wins, as on a quiet machine."""
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-llama")
    tuned_path, chosen = tune(cli, path, "--budget", "100MiB", "--max-accumulation", "2")
    tuned = json.loads(tuned_path.read_text())
    assert 0 < chosen["recomputed_blocks"] < chosen["total_blocks"] == 4, chosen
    assert tuned["recompute"] is True and tuned["recompute_granularity"] == chosen["recompute_granularity"]
    assert tuned["no_recompute_layers"] == list(range(chosen["recomputed_blocks"], 4))
    measured = trainer_peak(tuned_path, tmp_path)
    assert_in_band(chosen["peak_bytes"], measured["peak_bytes"])


@pytest.mark.slow(10)
def test_bert_sequence_classification_peaks_as_measured(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-bert", max_length=128, per_device_train_batch_size=32)
    tuned_path, chosen = tune(cli, path, "--budget", "60MiB", "--max-accumulation", "4", "--no-recompute")  # m=8 x 4
    measured = trainer_peak(tuned_path, tmp_path)
    assert_in_band(chosen["peak_bytes"], measured["peak_bytes"])


@pytest.mark.slow(17)
def test_gpt_recompute_is_exported_as_a_granularity_that_really_recomputes(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-gpt", max_length=128, per_device_train_batch_size=16)
    # Paddle 2.6.2: plain 82 MiB, every layer's core attention recomputed 64 MiB: only the latter fits
    tuned_path, chosen = tune(cli, path, "--budget", "72MiB", "--max-accumulation", "1")
    tuned = json.loads(tuned_path.read_text())
    assert chosen["recomputed_blocks"] == 4 and tuned["recompute"] is True
    assert tuned["recompute_granularity"] == "core_attn"  # "full" recomputes nothing in PaddleNLP 2.8.1's GPT
    recomputed = trainer_peak(tuned_path, tmp_path)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**tuned, "recompute": False}))
    assert recomputed["peak_bytes"] < 0.9 * trainer_peak(plain, tmp_path)["peak_bytes"]
    assert_in_band(chosen["peak_bytes"], recomputed["peak_bytes"])


@pytest.mark.slow(18)
def test_lora_is_measured_as_the_llm_script_builds_it_and_the_trainer_peaks_as_measured(cli, tmp_path, monkeypatch):
    """LoRA r=8 as PaddleNLP's llm script builds it: only the adapters train (their gradients and AdamW moments, not
    the model's), recompute saves less than in a full fine-tune (the frozen embeddings leave layer 0 unrecomputed),
    and the Trainer running the tuned file with LoRA peaks where vramtune measured."""
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-llama", lora=True, lora_rank=8)
    full = tmp_path / "full.json"
    full.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k not in ("lora", "lora_rank")}))

    def measured(spec, *flags):
        code, out, err = cli("measure", spec, "--device", "cpu", "--budget", "1GiB", "-m", 16, "--json", *flags)
        assert code == 0, err
        return json.loads(out)

    lora, whole = measured(path), measured(full)
    assert lora["trainable_params"] == 4 * 8 * (128 + 128) * 4 + 4 * 8 * (128 + 256) * 3  # r x (in + out), 7 per layer
    assert whole["trainable_params"] == whole["total_params"] < lora["total_params"]
    assert lora["gradient_bytes"] == 4 * lora["trainable_params"] < 0.1 * whole["gradient_bytes"]
    assert 8 * lora["trainable_params"] <= lora["optimizer_bytes"] < 0.1 * whole["optimizer_bytes"]
    assert lora["peak_bytes"] < whole["peak_bytes"]
    saving = {name: spec["peak_bytes"] - measured(source, "-r", 4)["peak_bytes"]
              for name, spec, source in (("lora", lora, path), ("full", whole, full))}
    assert 0 < saving["lora"] < 0.9 * saving["full"], saving
    tuned_path, chosen = tune(cli, path, "--budget", "120MiB", *ACCUMULATION_ONLY)
    tuned = json.loads(tuned_path.read_text())
    assert (tuned["lora"], tuned["lora_rank"]) == (True, 8) and chosen["trainable_params"] == lora["trainable_params"]
    trainer = trainer_peak(tuned_path, tmp_path)
    assert_in_band(chosen["peak_bytes"], trainer["peak_bytes"])


def test_prefix_tuning_is_measured_as_the_llm_script_builds_it(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-llama", prefix_tuning=True, num_prefix_tokens=32,
                             per_device_train_batch_size=8)
    tuned_path, chosen = tune(cli, path, "--budget", "200MiB")
    assert chosen["trainable_params"] == 32 * 2 * 4 * 128  # an embedding of 2 x layers x hidden per virtual token
    trainer = trainer_peak(tuned_path, tmp_path)
    assert_in_band(chosen["peak_bytes"], trainer["peak_bytes"])


@pytest.mark.slow(30)
def test_evaluation_is_part_of_the_run_and_the_trainer_evaluates_within_the_budget(cli, tmp_path, monkeypatch):
    """An evaluation batch of 32 that does not fit beside the tuned training state is lowered to the largest that
    does; the Trainer training the tuned LoRA file and evaluating at that batch peaks where vramtune measured, and
    both phases stay within the budget."""
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-llama", lora=True, do_eval=True, per_device_eval_batch_size=32)
    code, out, err = cli("probe", path, "--device", "cpu", "--budget", "120MiB", "--json", *ACCUMULATION_ONLY)
    assert code == 0, err
    report = json.loads(out)
    chosen, limit = report["chosen"], report["limit_bytes"]
    assert chosen["eval_requested"] == 32 and 1 <= chosen["eval_batch"] < 32
    larger = min(int(batch) for batch in chosen["eval_peaks"] if int(batch) > chosen["eval_batch"])
    assert int(chosen["eval_peaks"][str(larger)]) > limit  # the next one measured does not fit
    assert f"evaluation at batch {chosen['eval_batch']} (lowered from 32: larger ones do not fit)" in err
    tuned_path, _ = tune(cli, path, "--budget", "120MiB", *ACCUMULATION_ONLY)
    tuned = json.loads(tuned_path.read_text())
    assert tuned["per_device_eval_batch_size"] == chosen["eval_batch"] and tuned["do_eval"] is True
    trainer = trainer_peak(tuned_path, tmp_path)
    eval_peak = chosen["eval_peaks"][str(chosen["eval_batch"])]
    assert_in_band(chosen["peak_bytes"], trainer["peak_bytes"])
    if trainer["eval_peak_bytes"] is not None:  # Paddle 3 resets the peak: evaluation's own
        assert_in_band(eval_peak, trainer["eval_peak_bytes"], "evaluation: ")
    else:  # Paddle 2.6 cannot: the run's peak is the larger phase's
        larger = max(chosen["peak_bytes"], eval_peak)
        assert_in_band(larger, trainer["whole_run_peak_bytes"], "the run: ")
    assert max(trainer["peak_bytes"], trainer["whole_run_peak_bytes"]) <= limit


def test_apply_verifies_the_answer_with_the_users_trainer_script(cli, tmp_path, monkeypatch):
    """--verify-with names the user's Trainer script (issue 36): apply gives it a bounded copy of the tuned file
    (max_steps 3, nothing saved) and reads the Trainer's peak beside the probe's before it writes."""
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-llama")
    tuned_path = tmp_path / "tuned.json"
    code, out, err = cli("apply", path, "--device", "cpu", "--budget", "120MiB", "-o", tuned_path, "--json",
                         "--verify-with", f"{sys.executable} {RUNNER} {{file}}")
    assert code == 0, err
    [run] = json.loads(out)["verification"]
    assert (run["tool"], run["status"], run["steps"]) == ("your PaddleNLP Trainer script", "fits", 3), run
    assert 0.95 <= run["ratio"] <= 1.05, run
    assert "save_strategy" not in json.loads(tuned_path.read_text())  # the bounds are the copy's, not the file's
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(("fine_tuning", "accumulation", "evaluates"),
                         [("lora", 1, False), ("full", 2, True), ("lora", 8, True)])
def test_the_trainer_peaks_where_the_probe_measured_on_each_axis(cli, tmp_path, monkeypatch, fine_tuning,
                                                                accumulation, evaluates):
    """Tiny Llama at m=2 x 256 tokens, 3 optimizer steps, evaluated at batch 16 after the last where asked (the
    evaluation's peak, above training's here, is the run's on Paddle 2.6, which cannot reset the counter).
    Full fine-tuning with evaluation is probed by `check --verify-with` (issue 36): the probe's, and the script run
    by vramtune on a bounded copy, its training and its one evaluation pass read apart, each beside the probe's."""
    monkeypatch.chdir(tmp_path)
    path, _ = arguments_file(tmp_path, "tiny-llama", per_device_train_batch_size=2, device="cpu",
                             gradient_accumulation_steps=accumulation,
                             **({"lora": True, "lora_rank": 8} if fine_tuning == "lora" else {}),
                             **({"do_eval": True, "per_device_eval_batch_size": 16} if evaluates else {}))
    verifies = evaluates and fine_tuning == "full"
    code, out, err = cli(*(["check", path, "--verify-with", f"{sys.executable} {RUNNER} {{file}}"] if verifies else
                           ["measure", path, "-m", 2, "-k", accumulation]),
                         "--device", "cpu", "--budget", "1GiB", "--json")
    assert code == 0, err
    probe = json.loads(out)["measured"] if verifies else json.loads(out)
    trainer = trainer_peak(path, tmp_path)
    assert_in_band(probe["peak_bytes"], trainer["peak_bytes"], "training: ")
    if evaluates:
        evaluation = probe["eval_peaks"]["16"]
        if trainer["eval_peak_bytes"] is not None:  # Paddle 3 resets the peak: evaluation's own
            assert_in_band(evaluation, trainer["eval_peak_bytes"], "evaluation: ")
        else:
            assert_in_band(max(probe["peak_bytes"], evaluation), trainer["whole_run_peak_bytes"], "the run: ")
    if verifies:
        verified = json.loads(out)["verification"]
        assert (verified["status"], verified["steps"], verified["evaluation"]["batch"]) == ("fits", 3, 16), verified
        assert verified["evaluation"]["probe_bytes"] == evaluation
        assert_in_band(probe["peak_bytes"], verified["peak_bytes"], "verified training: ")
        assert_in_band(evaluation, verified["evaluation"]["peak_bytes"], "verified evaluation: ")
        said = next(line for line in err.splitlines() if line.startswith("note: verified by "))
        assert said.startswith("note: verified by your PaddleNLP Trainer script: training ") and (
            ", evaluation " in said and " at batch 16 (probe " in said), said
