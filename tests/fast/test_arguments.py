"""A PaddleNLP arguments file as the spec: every key read, refused by name, kept, or named as unknown; the keys that
change memory are part of the saved results' identity (no Paddle: fake devices)."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import SPECS
from fakes import FakeDevice, MiB

from vramtune.core.reading import SpecError
from vramtune.core.strategy import Strategy
from vramtune.spec import load_spec

BASE = {"model_name_or_path": "./tiny-llama", "output_dir": "./checkpoints", "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 1, "max_length": 256, "learning_rate": 3e-5, "logging_steps": 10,
        "device": "cpu"}


@pytest.fixture
def arguments(tmp_path, monkeypatch):
    """arguments(**keys) -> the path of an arguments file next to a copy of tests/specs/tiny-llama."""
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    monkeypatch.chdir(tmp_path)

    def write(name: str = "args.json", **keys) -> object:
        path = tmp_path / name
        path.write_text(json.dumps({**BASE, **keys}))
        return path
    return write


@pytest.mark.parametrize("key, value, message", [
    ("tensor_parallel_degree", 2, "2 changes memory: tensor parallelism runs on GPUs only and vramtune does not measure "
                                  "it: set it to 1 to tune the data-parallel part, or estimate it without measuring: "
                                  "vramtune estimate"),
    ("pipeline_parallel_degree", 2, "2 changes memory: pipeline parallelism runs on GPUs only and vramtune does not "
                                    "measure it: set it to 1 to tune the data-parallel part, or estimate it without "
                                    "measuring: vramtune estimate"),
    ("weight_quantize_algo", "nf4", "'nf4' changes memory: quantized weights are built by PaddleNLP's from_pretrained "
                                    "only (GPU kernels); a probe would measure unquantized weights: remove the key to "
                                    "tune without quantization, or estimate it without measuring: vramtune estimate"),
    ("sequence_parallel", True, "True changes memory: needs tensor parallelism, which vramtune does not measure: set it "
                                "to false"),
    ("sharding", "stage2 offload", "'stage2 offload': offloading to the host is not measured by vramtune: drop offload"),
    ("optim", "adafactor", "adafactor is not measured by vramtune (PaddleNLP 2.8's Trainer does not implement it "
                           "either); tune with optim: adamw"),
])
def test_a_key_that_changes_memory_and_is_not_measured_is_refused_by_name(arguments, cli, key, value, message):
    path = arguments(**{key: value})
    code, out, err = cli("validate", path)
    assert (code, out, err) == (2, "", f"error: {path}: {key}: {message}\n")


def test_keys_at_their_single_device_values_are_kept(arguments, cli):
    path = arguments(tensor_parallel_degree=1, pipeline_parallel_degree=-1, sequence_parallel=False, sharding="",
                     weight_quantize_algo=None, to_static=False)
    assert cli("validate", path) == (0, "", f"ok: {path}\n")


def test_every_refusal_in_one_run_and_unknown_keys_named_once(arguments, cli):
    path = arguments(tensor_parallel_degree=4, weight_quantize_algo="weight_only_int8", my_flag=1, lr_decay=0.1)
    code, _, err = cli("validate", path)
    assert code == 2 and [line.split(": ")[2] for line in err.splitlines()] == ["tensor_parallel_degree",
                                                                                "weight_quantize_algo"]
    path = arguments(my_flag=1, lr_decay=0.1, warmup_steps=10)  # warmup_steps: PaddleNLP's, no memory effect
    code, _, err = cli("validate", path)
    assert (code, err) == (0, f"warning: {path}: my_flag, lr_decay: neither PaddleNLP 2.8.1 arguments nor vramtune's; "
                              f"kept untouched (PaddleNLP's argument parser would reject them)\nok: {path}\n")


def test_src_length_without_tgt_length_takes_the_scripts_default(arguments):
    path = arguments(src_length=128)
    raw = json.loads(path.read_text())
    del raw["max_length"]
    path.write_text(json.dumps(raw))
    spec = load_spec(path)
    assert spec.model.seq_len == 2048
    assert spec.warnings == [f"{path}: no max_length: the llm scripts' default, 2048 tokens, is measured (their "
                             "sequences are at most max_length; src_length only cuts the prompt)"]
    path.write_text(json.dumps({**raw, "tgt_length": 64}))  # older llm scripts: src + tgt
    assert load_spec(path).model.seq_len == 192


def test_what_the_scripts_set_on_the_model_is_read(arguments):
    spec = load_spec(arguments(use_flash_attention=True, fuse_attention_qkv=True, hidden_dropout_prob=0.0,
                               zero_padding=True, max_grad_norm=0.5, fp16=True, fp16_opt_level="O2",
                               amp_master_grad=True))
    assert spec.model.config_fields == {"use_flash_attention": True, "fuse_attention_qkv": True,
                                        "hidden_dropout_prob": 0.0}
    assert spec.model.zero_padding is True and spec.train.max_grad_norm == 0.5
    precision = spec.settings["precision"]
    assert precision.allowed == ["fp16-o2", "fp16"] and precision.master_grad is True  # the run's half type kept
    assert load_spec(arguments(intokens=True)).model.zero_padding is True  # the deprecated name, as the scripts
    assert load_spec(arguments()).train.max_grad_norm == 1.0  # the Trainer clips by default


def test_every_memory_key_is_part_of_the_saved_results_identity(arguments, fake_cli):
    cli, backend = fake_cli(FakeDevice(per_sample=MiB / 20, blocks=4))
    first = arguments("a.json", max_grad_norm=1.0)
    assert cli("probe", first, "--budget", "200MiB")[0] == 0
    probes = len(backend.jobs)
    for keys in ({"zero_padding": True}, {"use_flash_attention": True}, {"max_grad_norm": 0.5},
                 {"amp_master_grad": True, "bf16": True}):
        code, out, _ = cli("probe", arguments("b.json", **keys), "--budget", "200MiB", "--json")
        assert code == 0 and json.loads(out)["reused"] == 0, keys
    code, out, _ = cli("probe", arguments("c.json", max_grad_norm=1.0, logging_steps=99), "--budget", "200MiB",
                       "--json")
    assert json.loads(out)["reused"] == probes  # a key with no memory effect does not re-probe


def test_flash_attention_measured_on_cpu_says_the_peak_over_states_attention(arguments, fake_cli):
    cli, _ = fake_cli(FakeDevice(per_sample=MiB / 20, blocks=4))
    code, out, _ = cli("probe", arguments(use_flash_attention=True), "--budget", "200MiB", "--json")
    assert code == 0 and json.loads(out)["notes"][0].startswith(
        "use_flash_attention: Paddle runs plain attention on CPU, which keeps the [seq, seq] attention scores")


def test_devices_on_the_command_line_scale_the_per_device_batch(arguments):
    path = arguments()
    assert load_spec(path, {"devices": 2}).train.target_batch == 32  # 16 per device x 2 ranks
    assert load_spec(arguments(sharding="stage1", sharding_parallel_degree=4)).train.target_batch == 64


def test_measure_with_devices_keeps_the_files_batch_per_rank(arguments, fake_cli):
    cli, backend = fake_cli(FakeDevice(per_sample=MiB / 20, blocks=4))
    code, _, err = cli("measure", arguments(), "-m", 16, "--devices", 2, "--budget", "1GiB", "--json")
    assert code == 0, err
    assert (backend.jobs[0].strategy["devices"], backend.jobs[0].strategy["accumulation"]) == (2, 1)


def test_the_new_user_files_of_issue_19_every_key_measured_or_refused(arguments, cli):
    """The file a new user tried: 0.2 said ok and measured a full fine-tune. Now the one key that cannot be measured
    is refused by name; without it, every key is read (LoRA, evaluation, flash attention, zero padding)."""
    keys = {"lora": True, "lora_rank": 8, "do_eval": True, "per_device_eval_batch_size": 32,
            "use_flash_attention": True, "zero_padding": True}
    path = arguments(tensor_parallel_degree=2, **keys)
    code, _, err = cli("validate", path)
    assert (code, err.count("\n")) == (2, 1) and f"{path}: tensor_parallel_degree: 2 changes memory" in err
    spec = load_spec(arguments(**keys))
    assert spec.settings["peft"].lora.rank == 8 and spec.settings["evaluation"].batch == 32
    assert spec.model.config_fields == {"use_flash_attention": True} and spec.model.zero_padding and not spec.warnings
    path = arguments(weight_quantize_algo="nf4", prefix_tuning=True, pipeline_parallel_degree=2, amp_master_grad=True,
                     bf16=True)
    code, _, err = cli("validate", path)
    assert code == 2 and [line.split(": ")[2] for line in err.splitlines()] == ["weight_quantize_algo",
                                                                                "pipeline_parallel_degree"]
    spec = load_spec(arguments(prefix_tuning=True, amp_master_grad=True, bf16=True))
    assert spec.settings["peft"].prefix_tokens == 128 and spec.settings["precision"].master_grad


@pytest.mark.parametrize(("key", "says"), [
    ("to_static", "the Trainer's own to_static conversion is not what vramtune measures (it measures eager, and its "
                  "own to_static for non-PaddleNLP models): set it to false to tune"),
    ("eval_with_do_generation", "generation during evaluation (a KV cache per sequence) is not measured: set it to "
                                "false to tune the evaluation loss and predictions"),
])
def test_a_trainer_switch_a_mechanism_does_not_measure_is_refused_by_that_mechanism(cli, arguments, key, says):
    """Switched on, refused by name (exit 2); switched off, read without a word."""
    path = arguments(**{key: True})
    code, _, err = cli("validate", path)
    assert (code, err) == (2, f"error: {path}: {key}: True changes memory: {says}\n")
    code, _, err = cli("validate", arguments(**{key: False}))
    assert code == 0 and key not in err


# files with every key apply writes, as apply writes them, over BASE
WRITTEN = {
    "fp32": {"do_train": True, "fp16": False, "bf16": False, "recompute": False, "optim": "adamw",
             "gradient_accumulation_steps": 4},
    "amp": {"do_train": True, "fp16": False, "bf16": True, "fp16_opt_level": "O2", "recompute": False,
            "optim": "adamw", "device": "cpu"},
    "stage": {"do_train": True, "fp16": True, "bf16": False, "fp16_opt_level": "O1", "recompute": False,
              "optim": "adamw", "sharding": "stage2", "sharding_parallel_degree": 2},
    "no stage": {"do_train": True, "fp16": False, "bf16": False, "recompute": False, "optim": "adamw",
                 "sharding": "", "sharding_parallel_degree": 2},
}


def round_trip_and_direct(spec, kind):
    """The strategy the round trip through apply's writer reads (None where it reads none) and the codec's."""
    from round_trip import written_as

    from vramtune.dialects.paddlenlp.codec import stated

    try:
        round_trip = written_as(spec, kind)
    except SpecError:
        round_trip = None
    return round_trip, stated(spec, kind)


def test_the_file_is_read_by_its_keys_as_the_round_trip_through_apply_reads_it(arguments, fake_cli, tmp_path):
    """The codec reads the strategy the round trip through apply's writer (check's reading before it) reads, on a
    CPU as a CPU probe runs it (fp32): over files with every key apply writes and files apply wrote on a fake CPU
    (device: cpu) and a fake GPU, each read on the kind of device it says."""
    files = [(arguments(f"{name}.json", **keys), kind) for name, keys in WRITTEN.items() for kind in ("gpu", "cpu")
             if kind == "gpu" or keys.get("device") == "cpu"]
    for device, budgets in ((FakeDevice(), ("64GiB", "49MiB", "26MiB")),
                            (FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5,
                                        amp_speed=2.0), ("64MiB", "40MiB", "30MiB"))):
        cli, _ = fake_cli(device)
        for name, keys in {"plain": {"device": device.kind}, "stage1": {"sharding": "stage1",
                                                                         "sharding_parallel_degree": 2},
                           "peft": {"lora": True, "do_eval": True, "prefix_tuning": True}}.items():
            for budget in budgets:
                written = tmp_path / f"{device.kind}-{name}-{budget}.tuned.json"
                code, _, err = cli("apply", arguments(f"{name}.json", **keys), "--budget", budget, "-o", written)
                assert code == 0, err
                files.append((written, device.kind))
    said = []
    for path, kind in files:
        round_trip, direct = round_trip_and_direct(load_spec(path), kind)
        assert round_trip is not None, path
        assert direct == (round_trip.with_(precision="fp32") if kind == "cpu" else round_trip), path
        said.append(round_trip.label())
    assert len(set(said)) > 8 and {"fp16 m=16 k=1 r=0 n=2 s=2", "bf16-o2 m=16 k=1 r=0"} <= set(said)
    assert round_trip_and_direct(load_spec(tmp_path / "amp.json"), "cpu")[1] == Strategy(micro_batch=16)


def test_a_hand_written_file_is_read_by_its_keys_and_their_defaults(arguments):
    """What the round trip could not read (it needs every key apply writes): a file's own keys, its parser's
    defaults for the others (per_device_train_batch_size 8, fp16_opt_level O1, sharding over every rank)."""
    from vramtune.dialects.paddlenlp.codec import stated

    expected = [({}, "gpu", None, Strategy(micro_batch=16)),
                ({"per_device_train_batch_size": None, "bf16": True}, "gpu", None, Strategy("bf16", 8)),
                ({"fp16": True, "fp16_opt_level": "O2"}, "gpu", 2, Strategy("fp16-o2", 16, devices=2)),
                ({"fp16": True, "fp16_opt_level": "O2"}, "cpu", None, Strategy(micro_batch=16)),
                ({"sharding": "stage1"}, "gpu", 2, Strategy(micro_batch=16, devices=2, sharding_stage=1)),
                ({"sharding": "stage1"}, "gpu", None, Strategy(micro_batch=16)),
                ({"sharding": "stage3", "sharding_degree": 4}, "gpu", None, Strategy(micro_batch=16, devices=4,
                                                                                    sharding_stage=3)),
                ({"sharding": "stage2", "sharding_parallel_degree": 1}, "gpu", 2, Strategy(micro_batch=16, devices=2))]
    for keys, kind, devices, strategy in expected:
        assert stated(load_spec(arguments(**keys), {"devices": devices}), kind) == strategy, keys


def test_the_layers_an_arguments_file_recomputes_are_read_from_the_models_config(arguments, tmp_path):
    """What the round trip through apply's writer could not read: recompute's layers, from the model's config.json
    (tiny-llama: 4 layers) less no_recompute_layers (the last ones: what apply writes); a file whose keys no strategy
    says is refused by key."""
    from vramtune.core.records import Budget, ProbeResult
    from vramtune.core.report import Report
    from vramtune.dialects.paddlenlp import arguments_file
    from vramtune.dialects.paddlenlp.codec import stated

    path = arguments()
    for strategy, granularities, partial in ((Strategy(micro_batch=16, recomputed_blocks=2,
                                                       recompute_granularity="core_attn"), ["full", "core_attn"], True),
                                             (Strategy(micro_batch=16, recomputed_blocks=4), ["full"], False)):
        chosen = ProbeResult("fits", strategy, facts={"total_blocks": 4, "recompute_options": {
            "granularities": granularities, "partial": partial}})
        report = Report(spec="args", spec_path=str(path), device_name="fake gpu", device_kind="gpu", device_bytes=0,
                        paddle_version="0.0-fake", budget=Budget(64 * MiB, 0.05), target_batch=16, chosen=chosen,
                        probes=[chosen])
        written = tmp_path / "recomputed.json"
        written.write_text(arguments_file.render(path, load_spec(path), report, "TUNED_FILE")[0])
        assert stated(load_spec(written), "gpu") == strategy
    bad = {"no_recompute_layers": {"recompute": True, "no_recompute_layers": [0]},
           "bf16": {"bf16": True, "fp16": True},
           "sharding_parallel_degree": {"sharding": "stage1", "sharding_parallel_degree": 2}}
    for key, keys in bad.items():
        with pytest.raises(SpecError) as raised:
            stated(load_spec(arguments("bad.json", **keys), {"devices": 4}), "gpu")
        assert [problem.key for problem in raised.value.problems] == [key]
    built_in = arguments("built-in.json", model_name_or_path="llama-7b", recompute=True)
    with pytest.raises(SpecError, match="recompute: true: the layers 'llama-7b' has are PaddleNLP's to say"):
        stated(load_spec(built_in), "gpu")
