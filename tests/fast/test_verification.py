"""apply verifies its answer with the file's own tool before writing it (issue 36), over the fake backend: the tool's
run is the fake's peak times its `tool_drift`, the search's and the choice's logic real."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import CONFIGS, SPECS
from fakes import FakeDevice, MiB


def small(drift: float = 0.0) -> FakeDevice:
    """Fits from micro-batch 256 down (20 MiB fixed + 0.05 MiB per sample); the tool holds `drift` more."""
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6, tool_drift=drift)


@pytest.fixture
def spec(tmp_path):
    """The shipped MLP spec (target 2048, limit 38.0 MiB) beside its model, in a folder of the test's own."""
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("mlp-python-cpu.yaml", "mlp_model.py"):
        shutil.copy(CONFIGS / name, folder)
    return folder / "mlp-python-cpu.yaml"


def lines_after_search(err: str) -> list[str]:
    """stderr from the first line about verification on."""
    lines = err.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith(("verifying", "not verified"))):]


def test_the_users_command_verifies_the_answer_and_the_report_says_its_peak_beside_the_probes(fake_cli, spec):
    cli, backend = fake_cli(small())
    code, out, err = cli("apply", spec, "--verify-with", "python train.py {file} --steps 3", "--json")
    target = spec.with_name("mlp-python-cpu.tuned.yaml")
    assert code == 0, err
    assert lines_after_search(err) == [
        "verifying fp32 m=256 k=8 r=0/6 with your training loop (vramtune.runtime)",
        "verified by your training loop (vramtune.runtime): 32.8 MiB (probe 32.8 MiB, +0.0%) of 38.0 MiB: fits (1.0s)",
        f"wrote {target}"]
    hidden = spec.with_name(".mlp-python-cpu.tuned.verifying.yaml")
    assert [run.argv for run in backend.tool_runs] == [["python", "train.py", str(hidden), "--steps", "3"]]
    assert not hidden.exists() and yaml.safe_load(target.read_text())["tuned"]["micro_batch"] == 256
    verification = json.loads(out)["verification"]
    assert [(run["status"], run["ratio"], run["steps"]) for run in verification] == [("fits", 1.0, 3)]


def test_a_tool_over_the_limit_makes_the_choice_again_with_its_difference_folded_in(fake_cli, spec):
    """The tool holds 30% more than the probe: m=256 (32.8 MiB measured) is 42.6 MiB in the tool, over 38.0; the
    next fastest whose measured peak times 1.3 fits is chosen, verified and written."""
    cli, backend = fake_cli(small(drift=0.3))
    code, out, err = cli("apply", spec, "--verify-with", "python train.py {file}", "--json")
    assert code == 0, err
    assert lines_after_search(err)[:5] == [
        "verifying fp32 m=256 k=8 r=0/6 with your training loop (vramtune.runtime)",
        "verified by your training loop (vramtune.runtime): 42.6 MiB (probe 32.8 MiB, +30.0%) of 38.0 MiB: over the "
        "limit (1.0s)",
        "choosing again with the tool's +30.0% folded in: fp16-o2 m=128 k=16 r=0/6 (26.4 MiB measured, 34.3 MiB with "
        "it)",
        "verifying fp16-o2 m=128 k=16 r=0/6 with your training loop (vramtune.runtime)",
        "verified by your training loop (vramtune.runtime): 34.3 MiB (probe 26.4 MiB, +30.0%) of 38.0 MiB: fits (1.0s)"]
    payload = json.loads(out)
    assert [run["status"] for run in payload["verification"]] == ["over_budget", "fits"]
    assert (payload["chosen"]["micro_batch"], payload["exported"]["micro_batch"]) == (256, 128)
    tuned = yaml.safe_load(spec.with_name("mlp-python-cpu.tuned.yaml").read_text())["tuned"]
    assert (tuned["micro_batch"], tuned["accumulation"]) == (128, 16)
    assert len(backend.tool_runs) == 2


def test_when_nothing_fits_with_the_tools_difference_nothing_is_written_and_apply_exits_1(fake_cli, spec):
    cli, _ = fake_cli(small(drift=3.0))
    code, _, err = cli("apply", spec, "--verify-with", "python train.py {file}")
    assert code == 1
    assert err.splitlines()[-1] == (
        "error: no configuration verified to fit mlp-python-cpu within the budget: your training loop "
        "(vramtune.runtime) ran over it (see above) and no other measured one fits with its difference folded in; "
        "nothing was written (--no-verify writes the probes' answer unverified)")
    assert sorted(path.name for path in spec.parent.iterdir()) == ["mlp-python-cpu.yaml", "mlp_model.py"]


def test_a_spec_without_a_command_is_written_unverified_and_says_how_to_verify_it(fake_cli, spec):
    cli, backend = fake_cli(small(drift=3.0))
    code, _, err = cli("apply", spec)
    assert code == 0 and backend.tool_runs == []
    assert lines_after_search(err)[0] == (
        "not verified by the file's own tool: the training loop (vramtune.runtime) is your own: name it to verify the "
        "answer with it, e.g. --verify-with \"python train.py {file}\" ({file}: the tuned file; vramtune stops it after 3 "
        "optimizer steps)")


def test_no_verify_writes_the_probes_answer_without_a_word_of_verification(fake_cli, spec):
    cli, backend = fake_cli(small(drift=3.0))
    code, out, err = cli("apply", spec, "--no-verify", "--json")
    assert code == 0 and backend.tool_runs == [] and "verif" not in err.replace(str(spec.parent), "")
    assert json.loads(out)["verification"] == []


def test_another_format_is_verified_by_the_users_command_only(fake_cli, spec):
    cli, backend = fake_cli(small())
    code, _, err = cli("apply", spec, "--format", "paddlenlp")
    assert code == 0 and backend.tool_runs == []
    assert lines_after_search(err)[0] == (
        "not verified by the file's own tool: --format paddlenlp is not the file's own (--format yaml is): name the "
        "command that trains it to verify it, --verify-with \"... {file}\"")
    code, _, err = cli("apply", spec, "--format", "paddlenlp", "--force", "--verify-with", "python run.py {file}")
    assert code == 0, err
    hidden = spec.with_name(".mlp-python-cpu.tuned.verifying.json")
    assert [run.argv for run in backend.tool_runs] == [["python", "run.py", str(hidden)]]
    assert "verified by your command: 32.8 MiB (probe 32.8 MiB, +0.0%) of 38.0 MiB: fits (1.0s)" in err


def test_bad_verification_flags_exit_2_before_any_probe_every_problem_at_once(fake_cli, spec):
    cli, backend = fake_cli(small())
    code, _, err = cli("apply", spec, "--verify-with", "python train.py", "--no-verify", "-o", "-", "--json")
    assert code == 2 and backend.jobs == []
    assert err.splitlines() == [
        "error: --verify-with 'python train.py' does not name the tuned file: write {file} where it goes",
        "error: --verify-with and --no-verify: choose one (a command to verify with, or no verification)",
        "error: -o - and --json both write to stdout: write the file with -o FILE (the JSON report names it), or "
        "leave out --json to get the file alone on stdout"]
    code, _, err = cli("apply", spec, "--verify-with", "python 'train.py {file}")
    assert (code, err) == (2, "error: --verify-with \"python 'train.py {file}\": No closing quotation\n")


@pytest.fixture
def evaluating(tmp_path, monkeypatch):
    """A PaddleNLP arguments file (target 16) that evaluates at batch 32, beside its tiny model."""
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"model_name_or_path": "./tiny-llama", "max_length": 64, "output_dir": "./out",
                                "per_device_train_batch_size": 16, "do_eval": True,
                                "per_device_eval_batch_size": 32}))
    return path


def evaluates(eval_drift: float = 0.0) -> FakeDevice:
    """Training fits from m=8 (20 MiB + 2 MiB per sample, limit 38.0 MiB); evaluation at 32 (44.0 MiB) does not fit
    beside the training state, at 16 (32.0 MiB) it does: the file is written with 16."""
    return FakeDevice(eval_per_sample=0.75 * MiB, eval_drift=eval_drift)


def test_a_file_that_evaluates_is_verified_with_one_evaluation_pass_each_phase_beside_the_probes(fake_cli, evaluating):
    cli, backend = fake_cli(evaluates(eval_drift=0.1))
    code, out, err = cli("apply", evaluating, "--budget", "40MiB", "--verify-with", "python run.py {file}", "--json")
    assert code == 0, err
    [run] = backend.tool_runs
    assert run.eval_batch == 16
    assert run.notes == ["the Trainer evaluates once, after step 3, at batch 16 (the copy's evaluation_strategy "
                         "\"steps\", eval_steps 3, max_evaluate_steps 3)"]
    said = lines_after_search(err)
    assert said[1] == ("verified by your PaddleNLP Trainer script: training 36.0 MiB (probe 36.0 MiB, +0.0%), "
                       "evaluation 35.2 MiB at batch 16 (probe 32.0 MiB, +10.0%) of 38.0 MiB: fits (1.0s)")
    [verification] = json.loads(out)["verification"]
    assert verification["evaluation"] == {"batch": 16, "peak_bytes": int(32 * MiB * 1.1), "probe_bytes": 32 * MiB,
                                          "ratio": 1.1, "steps": 3}
    assert json.loads(evaluating.with_name("args.tuned.json").read_text())["per_device_eval_batch_size"] == 16


def test_an_evaluation_over_the_limit_is_chosen_again_at_a_lower_evaluation_batch_and_verified_again(fake_cli,
                                                                                                     evaluating):
    """The tool's evaluation holds 40% more (44.8 MiB at batch 16, over 38.0 with training at 36.0 fitting): the
    same training strategy is chosen again at the largest evaluation batch a line through the probes' evaluation
    peaks (32.0 MiB at 16, 44.0 at 32) predicts to fit with the 40% (9: not measured), verified again, and written."""
    cli, backend = fake_cli(evaluates(eval_drift=0.4))
    code, out, err = cli("apply", evaluating, "--budget", "40MiB", "--verify-with", "python run.py {file}", "--json")
    assert code == 0, err
    assert lines_after_search(err)[1:7] == [
        "verified by your PaddleNLP Trainer script: training 36.0 MiB (probe 36.0 MiB, +0.0%), evaluation 44.8 MiB at "
        "batch 16 (probe 32.0 MiB, +40.0%) of 38.0 MiB: over the limit (evaluation) (1.0s)",
        "  the Trainer evaluates once, after step 3, at batch 16 (the copy's evaluation_strategy \"steps\", eval_steps 3, "
        "max_evaluate_steps 3)",
        "choosing again with the tool's evaluation's +40.0% folded in: fp32 m=8 k=2 r=0/4 (evaluation at batch 9: not "
        "measured, predicted to fit with it by a line through the probes' evaluation peaks, lowered from 32)",
        "verifying fp32 m=8 k=2 r=0/4 with your PaddleNLP Trainer script",
        "verified by your PaddleNLP Trainer script: training 36.0 MiB (probe 36.0 MiB, +0.0%), evaluation 37.4 MiB at "
        "batch 9 of 38.0 MiB: fits (1.0s)",
        "  the Trainer evaluates once, after step 3, at batch 9 (the copy's evaluation_strategy \"steps\", eval_steps 3, "
        "max_evaluate_steps 3)"]
    assert [run.eval_batch for run in backend.tool_runs] == [16, 9]
    assert [run["evaluation"]["probe_bytes"] for run in json.loads(out)["verification"]] == [32 * MiB, None]
    assert json.loads(evaluating.with_name("args.tuned.json").read_text())["per_device_eval_batch_size"] == 9


def test_choosing_again_folds_the_ratio_of_the_phase_that_was_over():
    """Evaluation over by 10.5%: the same strategy at the largest evaluation batch predicted to fit with it, training's
    ratio left out; training over: its ratio, the evaluation batch kept."""
    from vramtune.core.records import Budget, ProbeResult
    from vramtune.core.strategy import Strategy
    from vramtune.core.verification import Verified
    from vramtune.verifying.answer import Ratios, _folded

    budget = Budget(100 * MiB, 0.0)
    result = ProbeResult("fits", Strategy(micro_batch=8), peak_bytes=95 * MiB, samples_per_sec=1.0,
                         facts={"eval_requested": 32, "eval_batch": 16, "eval_accumulation_steps": None,
                                "eval_peaks": {"32": 120 * MiB, "16": 95 * MiB, "8": 80 * MiB},
                                "eval_kept": {"32": 0, "16": 0, "8": 0}})
    over = Verified("tool", "over_budget", 96 * MiB, 95 * MiB, eval_batch=16, eval_peak_bytes=105 * MiB,
                    probe_eval_bytes=95 * MiB)
    ratios = Ratios()
    assert ratios.fold(over, budget) and (ratios.training, round(ratios.evaluation, 3)) == (1.0, 1.105)
    [again] = _folded([result], {(result.strategy, 16)}, ratios, budget)
    # between 8 (80 MiB x 1.105 fits) and 16 (95 MiB x 1.105 does not): the line through 8 and 32 predicts 14
    assert (again.strategy, again.facts["eval_batch"]) == (result.strategy, 14)
    assert ratios.words() == "the tool's evaluation's +10.5%"
    training = Ratios()
    assert training.fold(Verified("tool", "over_budget", 110 * MiB, 100 * MiB, eval_batch=16,
                                  eval_peak_bytes=90 * MiB, probe_eval_bytes=95 * MiB), budget)
    assert (training.training, training.evaluation) == (1.1, 1.0)
    assert _folded([result], set(), training, budget) == []  # 95 MiB x 1.1 does not fit


def test_the_trainers_are_asked_for_one_evaluation_pass_after_the_bounded_steps():
    """After step 3 (inside the training loop, as the real run evaluates), 3 evaluation steps, or the file's
    eval_accumulation_steps where more (its kept steps moved off the device at the last), or its own
    max_evaluate_steps where fewer; nothing where the file does not evaluate."""
    from vramtune.core.verification import evaluation_steps
    from vramtune.dialects.paddleformers.verify import evaluated as formers
    from vramtune.dialects.paddlenlp.verify import evaluated as nlp
    from vramtune.mechanisms.evaluation import EvaluationSettings

    assert [evaluation_steps(None), evaluation_steps(8), evaluation_steps(8, 2), evaluation_steps(None, -1)] == [
        3, 8, 2, 3]
    assert nlp(None, {}) == {} and formers(None, {}) == ([], None, None)
    assert nlp(EvaluationSettings(batch=16, accumulation_steps=4), {"max_evaluate_steps": -1}) == {
        "do_eval": True, "evaluation_strategy": "steps", "eval_steps": 3, "max_evaluate_steps": 4}
    assert formers(EvaluationSettings(), {"per_device_eval_batch_size": "4", "max_evaluate_steps": "2"}) == (
        ["do_eval=true", 'evaluation_strategy="steps"', "eval_steps=3", "max_evaluate_steps=2"], 4,
        'the Trainer evaluates once, after step 3, at batch 4 (evaluation_strategy="steps" eval_steps=3 '
        "max_evaluate_steps=2)")


def test_a_lower_evaluation_batch_is_predicted_through_the_training_state_where_one_batch_was_measured():
    from vramtune.mechanisms.evaluation.kept import largest_fitting

    one = {"eval_peaks": {"16": 60 * MiB}, "eval_kept": {"16": 0}, "eval_accumulation_steps": None}
    assert largest_fitting(one, 50 * MiB, 1.0, state=20 * MiB) == 12  # 20 MiB + 2.5 MiB per sample
    assert largest_fitting(one, 50 * MiB, 1.0) is None  # no line through one point
    assert largest_fitting(one, 70 * MiB, 1.1, state=20 * MiB) == 16  # the measured batch fits with the ratio
