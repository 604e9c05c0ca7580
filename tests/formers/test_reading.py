"""A PaddleFormers config read as a spec, without Paddle: every key checked against the keys PaddleFormers' parser
accepts, memory keys measured, mapped or refused by name, a GPU file probed with CPU equivalents and written back
unchanged but for the tuned keys. (Configs here name no training data, so no child counts its samples.)"""
from __future__ import annotations

import json

import pytest
import yaml
from formers_client import FORMERS, config_text

from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.dialects.paddleformers.export import tuned_keys
from vramtune.dialects.roundtrip import DELETE
from vramtune.plugins import SOURCES
from vramtune.spec import SpecError, load_spec

NO_DATA = {"train_dataset_path": None}


@pytest.fixture
def config(tmp_path):
    def write(name: str = "sft.yaml", **keys):
        path = tmp_path / name
        path.write_text(config_text(**{**NO_DATA, **keys}))
        return path
    return write


def test_a_config_is_a_spec_with_its_batch_sequence_and_model(config):
    spec = load_spec(config(per_device_train_batch_size=2, gradient_accumulation_steps=3, max_seq_len=96))
    assert (spec.source, spec.train.target_batch, spec.model.seq_len, spec.model.stage) == ("paddleformers", 6, 96,
                                                                                            "SFT")
    assert spec.model.folder == str(FORMERS / "llama")
    assert spec.train.max_grad_norm == 1.0 and spec.train.learning_rate == 1.0e-4
    assert SOURCES["paddleformers"].notes(spec.model, "cpu") == [
        "sequence length 96: max_seq_len, an upper bound (the training data is not there to find its longest "
        "sample)"]


def test_unknown_keys_are_named_as_paddleformers_parser_would_reject_them(cli, config):
    code, _, err = cli("validate", config(per_device_train_batch=2, lora_ranks=4))
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "lora_ranks: PaddleFormers 1.2.0's par" in lines[0]
    assert lines[0].endswith("(did you mean 'lora_rank'?)")
    assert lines[1].endswith("(did you mean 'per_device_train_batch_size'?)")


@pytest.mark.parametrize(("key", "value", "says"), [
    ("context_parallel_size", 2, "context parallelism is not measured: set it to 1, or estimate it without "
                                 "measuring: vramtune estimate"),
    ("compute_type", "wint8", "'wint8' quantizes the weights with GPU kernels"),
    ("compute_type", "fp32", "must be one of bf16, fp16, float32, wint4, wint8, wint4/8, nf4; got 'fp32'"),
    ("sharding_offload_opt_buffersize_GB", 2, "2 changes memory: offloading sharding's buffers is not measured: "
                                              "remove it"),
    ("sharding_parallel_size", "two", "must be an integer, got a string ('two')"),  # named as the file names it
    ("stage", "VL-PT", "must be one of SFT, PT, DPO, VL-SFT, VL-DPO"),  # VL-SFT and VL-DPO: estimated, not probed
    ("lora_path", "./adapter", "vramtune never loads weights"),
    ("to_static", True, "True changes memory: the Trainer's to_static conversion is not measured (vramtune measures "
                        "eager): set it to false to tune"),
    ("eval_with_do_generation", True, "True changes memory: generation during evaluation (a KV cache per sequence) "
                                      "is not measured: set it to false"),
])
def test_a_memory_key_nothing_measures_is_refused_by_name(cli, config, key, value, says):
    code, _, err = cli("validate", config(**{key: value}))
    assert code == 2 and f"{key}: " in err and says in err, err


def test_a_missing_model_folder_is_named(cli, config):
    code, _, err = cli("validate", config(model_name_or_path="./no-such-model"))
    assert code == 2 and "model_name_or_path: './no-such-model': no such local model folder" in err


def test_a_gpu_file_is_probed_with_cpu_equivalents_said(config):
    path = config(compute_type=None, _attn_implementation=None, sharding=None, device=None, amp_master_grad=None)
    spec = load_spec(path)
    assert spec.settings["precision"].allowed == ["bf16-o2", "bf16"]  # compute_type's default: bf16
    assert spec.settings["precision"].master_grad  # amp_master_grad's default: true
    notes = SOURCES["paddleformers"].notes(spec.model, "cpu")
    assert notes[1] == ("probed on CPU with the CPU equivalents of compute_type: '(default)' -> 'float32', "
                        "sharding: '(default)' -> '', _attn_implementation: '(default)' -> 'eager'; fused kernels "
                        "off; the file keeps its own settings")
    assert SOURCES["paddleformers"].notes(spec.model, "gpu") == notes[:1]


def test_packing_measures_max_seq_len(config):
    spec = load_spec(config(packing=True, max_seq_len=64))
    assert spec.model.seq_len == 64
    assert spec.model.seq_note == "sequence length 64: max_seq_len (packing fills every row to it)"


def test_key_value_overrides_are_read_as_paddleformers_reads_them(config):
    spec = load_spec(config(), {"kit.options": ["per_device_train_batch_size=2", "gradient_accumulation_steps=8"]})
    assert spec.train.target_batch == 16


def test_json_config_is_recognised_and_paddlenlp_arguments_files_keep_working(tmp_path):
    formers = tmp_path / "sft.json"
    formers.write_text(json.dumps({"model_name_or_path": str(FORMERS / "llama"), "stage": "SFT", "max_seq_len": 64,
                                   "output_dir": "./out", "per_device_train_batch_size": 2}))
    assert load_spec(formers).source == "paddleformers"
    paddlenlp = tmp_path / "args.json"
    paddlenlp.write_text(json.dumps({"model_name_or_path": str(FORMERS / "llama"), "max_length": 64,
                                     "output_dir": "./out", "per_device_train_batch_size": 2}))
    assert load_spec(paddlenlp).source == "paddlenlp"


def _tuned(device_kind="cpu", **strategy) -> Tuned:
    return Tuned(strategy=Strategy.from_json({"micro_batch": 2, "accumulation": 2, **strategy}), facts={},
                 device_kind=device_kind)


def test_apply_writes_recompute_only_as_a_combination_the_models_honour():
    recomputing = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    assert tuned_keys({"per_device_train_batch_size": 4}, _tuned(recomputed_blocks=2)) == {
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, **recomputing}
    assert tuned_keys({**recomputing, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2},
                      _tuned()) == dict.fromkeys(recomputing, DELETE)
    # a combination that recomputes nothing is left as the user wrote it
    assert tuned_keys({"recompute_granularity": "full", "per_device_train_batch_size": 2,
                       "gradient_accumulation_steps": 2}, _tuned()) == {}


def test_apply_never_writes_cpu_equivalents_and_writes_the_precision_chosen_on_a_gpu():
    assert "compute_type" not in tuned_keys({"compute_type": "bf16"}, _tuned())
    assert tuned_keys({"compute_type": "bf16", "fp16_opt_level": "O1", "per_device_train_batch_size": 2,
                       "gradient_accumulation_steps": 2}, _tuned("gpu", precision="bf16-o2")) == {
        "fp16_opt_level": "O2"}


def test_apply_writes_the_users_file_back_with_only_the_tuned_keys(fake_cli, config):
    from fakes import FakeDevice

    path = config(per_device_train_batch_size=8)
    invoke, _ = fake_cli(FakeDevice())  # 20 MiB of state, 2 MiB per sample: m=8 needs 36 MiB
    code, _, err = invoke("apply", path, "--budget", "32MiB", "--no-recompute")
    assert code == 0, err
    written = path.with_name("sft.tuned.yaml").read_text()
    before = path.read_text().splitlines()
    recorded, *after = written.splitlines()  # first, the budget `vramtune check` reads (a comment PaddleFormers drops)
    assert recorded == ("# vramtune: tuned for a budget of 32.0 MiB (33554432 bytes); `vramtune check FILE` gates it "
                        "in CI")
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert changed == [("per_device_train_batch_size: 8", "per_device_train_batch_size: 4"),
                       ("gradient_accumulation_steps: 1", "gradient_accumulation_steps: 2")]
    assert after[:2] == ["# a PaddleFormers 1.x config (paddleformers-cli train)", "### data"]


def test_overrides_after_the_file_as_paddleformers_cli_takes_them(fake_cli, config):
    from fakes import FakeDevice

    invoke, _ = fake_cli(FakeDevice())
    code, out, err = invoke("probe", config(), "per_device_train_batch_size=2", "gradient_accumulation_steps=3",
                            "--budget", "64MiB", "--json")
    assert code == 0, err
    assert json.loads(out)["target_batch"] == 6


@pytest.mark.parametrize("devices", [{"sharding_parallel_size": 4}, {}])
def test_the_per_device_batch_times_the_ranks_is_the_target(config, devices):
    overrides = {} if devices else {"devices": 4}
    spec = load_spec(config(per_device_train_batch_size=2, gradient_accumulation_steps=2, sharding="stage1",
                            **devices), overrides)
    assert (spec.devices, spec.train.target_batch) == (4, 16)


def test_apply_writes_a_tab_indented_json_config_back_with_its_tabs(fake_cli, tmp_path):
    from fakes import FakeDevice

    keys = {**yaml.safe_load(config_text(**NO_DATA)), "per_device_train_batch_size": 8}
    path = tmp_path / "sft.json"
    path.write_text(json.dumps({k: v for k, v in keys.items() if v is not None}, indent="\t") + "\n")
    invoke, _ = fake_cli(FakeDevice())
    code, _, err = invoke("apply", path, "--budget", "32MiB", "--no-recompute")
    assert code == 0, err
    written = path.with_name("sft.tuned.json").read_text()
    assert written == path.read_text().replace('\t"per_device_train_batch_size": 8', '\t"per_device_train_batch_size": 4') \
        .replace('\t"gradient_accumulation_steps": 1', '\t"gradient_accumulation_steps": 2')


def test_a_file_apply_cannot_edit_is_exit_2_with_the_reason(fake_cli, config, monkeypatch):
    from fakes import FakeDevice

    from vramtune.dialects.paddleformers import export
    from vramtune.dialects.roundtrip import RoundTripError

    def refuse(*_):
        raise RoundTripError("stage.x: stage is not a mapping")

    monkeypatch.setattr(export, "set_keys", refuse)
    invoke, _ = fake_cli(FakeDevice())
    code, _, err = invoke("apply", config(per_device_train_batch_size=8), "--budget", "32MiB", "--no-recompute")
    assert (code, err.splitlines()[-1]) == (2, "error: stage.x: stage is not a mapping")


def test_apply_says_which_overrides_the_tuned_file_takes_and_the_command_with_the_rest(fake_cli, config):
    from fakes import FakeDevice

    path = config()  # per_device_train_batch_size 4, max_steps 4
    invoke, _ = fake_cli(FakeDevice())
    code, _, err = invoke("apply", path, "per_device_train_batch_size=8", "max_steps=2", "logging_dir=my logs",
                          "--budget", "32MiB", "--no-recompute")
    assert code == 0, err
    assert "warning: per_device_train_batch_size=8: tuned in the file now; passing them again would override the " \
           "tuned value\n" in err
    tuned = path.with_name(f"{path.stem}.tuned{path.suffix}").resolve()
    assert f"warning: train the tuned file with: paddleformers-cli train {tuned} 'logging_dir=my logs' max_steps=2\n" \
        in err
    assert "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n" in path.with_name("sft.tuned.yaml") \
        .read_text()


def test_validate_runs_no_paddle_and_says_the_sequence_length_is_read_at_probe_time(cli, tmp_path, monkeypatch):
    def no_child(*_):
        raise AssertionError("validate ran the data pass")

    monkeypatch.setattr("vramtune.dialects.paddleformers.reading.longest_sample", no_child)
    path = tmp_path / "sft.yaml"
    path.write_text(config_text())  # names training data that is there
    assert cli("validate", path) == (0, "", "warning: the sequence length is read from the training data at probe time "
                                            "(its longest sample kept, tokenized by PaddleFormers); not here, which "
                                            f"runs no Paddle\nok: {path}\n")
    with pytest.raises(AssertionError, match="validate ran the data pass"):
        load_spec(path)  # a probe's reading does run it


def test_a_refused_file_is_refused_for_its_own_problems_without_a_data_pass(tmp_path, monkeypatch):
    def no_child(*_):
        raise AssertionError("the data pass ran")

    monkeypatch.setattr("vramtune.dialects.paddleformers.reading.longest_sample", no_child)
    path = tmp_path / "sft.yaml"
    path.write_text(config_text())  # names training data that is there
    with pytest.raises(SpecError) as refused:
        load_spec(path, {"kit.options": ["max_seq_len=64x"]})
    assert [str(problem) for problem in refused.value.problems] == [
        f"{path}: max_seq_len: must be an integer, got a string ('64x')"]  # was also: every sample is longer than 4096


def test_a_damaged_length_cache_is_measured_again_and_rewritten(tmp_path, monkeypatch):
    import subprocess

    from vramtune.dialects.paddleformers import lengths

    runs = []

    def child(command, **_):
        runs.append(command)
        return subprocess.CompletedProcess(command, 0, stdout='{"longest": 7, "kept": 3, "sample": "hi"}\n')

    monkeypatch.setattr(lengths.subprocess, "run", child)
    data = tmp_path / "sft.jsonl"
    data.write_text("{}\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    cached = cache / f"{lengths.cache_key({}, str(tmp_path), [str(data)])}.json"
    for damaged in ('{"longest": 7', "[]"):
        cached.write_text(damaged)
        assert lengths.longest_sample({}, str(tmp_path), [str(data)], cache) == {"longest": 7, "kept": 3,
                                                                                 "sample": "hi"}
        assert json.loads(cached.read_text()) == {"longest": 7, "kept": 3, "sample": "hi"}
    assert len(runs) == 2
    assert lengths.longest_sample({}, str(tmp_path), [str(data)], cache)["longest"] == 7 and len(runs) == 2


def test_an_offloading_key_is_refused_by_name(config):
    path = config(tensorwise_offload_optimizer=True)
    with pytest.raises(SpecError, match="tensorwise_offload_optimizer: True changes memory: offloading the optimizer"):
        load_spec(path)
