"""`vramtune check` on a tool's own file (a PaddleFormers config here; no tuned: section): the strategy the file
states, read as `apply` writes it, measured against --budget or the budget the file records (no Paddle: fake
devices), and `measure` on it given neither -m nor -k. tests/formers/test_check_formers_file.py runs the same gate
for real on the demo config."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import CONFIGS, SPECS, formers_demo, needs_paddlenlp
from fakes import FakeDevice, MiB

from vramtune.dialects.recorded import recorded_budget, with_budget_line
from vramtune.spec.files import OPTIONS_ELSEWHERE

MEASURED = ("  0.060s per optimizer step, 66.7 samples/s, loss 1.0\n"  # the fake device's m=2 k=2
            "  repeated blocks found: 4\n")


@pytest.fixture
def formers_file(tmp_path, monkeypatch):
    """formers_file(old=new, ...) -> the demo config, edited, in tmp_path (its data absent: no Paddle reads it)."""
    monkeypatch.chdir(tmp_path)

    def write(*edits: tuple[str, str], name: str = "sft.yaml"):
        return formers_demo(tmp_path, ("per_device_train_batch_size: 4", "per_device_train_batch_size: 2"),
                            ("gradient_accumulation_steps: 1", "gradient_accumulation_steps: 2"), *edits, name=name)
    return write


def test_the_files_strategy_passes_within_the_budget(fake_cli, formers_file):
    cli, backend = fake_cli(FakeDevice())
    path = formers_file()
    code, out, err = cli("check", path, "--budget", "64MiB")
    assert (code, out) == (0, "")
    assert err == ("note: the file's strategy: fp32 m=2 k=2 r=0 (--budget 64.0 MiB)\n"
                   "fp32 m=2 k=2 r=0: fits\n"
                   "  peak 24.0 MiB allocated (budget 64.0 MiB)\n" + MEASURED +
                   "  on fake cpu, paddle 0.0-fake\n"
                   "check: pass\n")
    assert [(job.strategy["micro_batch"], job.strategy["accumulation"]) for job in backend.jobs] == [(2, 2)]


def test_over_the_budget_fails_with_exit_1(fake_cli, formers_file):
    cli, _ = fake_cli(FakeDevice())
    code, out, err = cli("check", formers_file(), "--budget", "21MiB", "--json")
    verdict = json.loads(out)
    reason = ("peak 25165824 bytes (24.0 MiB) no longer fits the limit 20919091 bytes (19.9 MiB = budget 22020096 less "
              "5% headroom)")
    assert (code, verdict["status"], verdict["reasons"], verdict["limit_bytes"]) == (1, "fail", [reason], 20919091)
    assert err.endswith(f"error: {reason}\ncheck: fail\n")


def test_the_budget_the_file_records_needs_no_flag_and_the_flag_wins(fake_cli, formers_file, tmp_path):
    cli, _ = fake_cli(FakeDevice())
    path = formers_file()
    path.write_text(with_budget_line(with_budget_line(path.read_text(), 21 * MiB), 64 * MiB))  # replaced, not added
    assert path.read_text().count("# vramtune: tuned for a budget of") == 1
    assert recorded_budget(path.read_text()) == 64 * MiB
    code, _, err = cli("check", path)
    assert code == 0 and err.startswith("note: the file's strategy: fp32 m=2 k=2 r=0 (the budget it records "
                                        "64.0 MiB)\n")
    code, _, err = cli("check", path, "--budget", "21MiB")
    assert code == 1 and err.endswith("check: fail\n")


def test_the_precision_a_gpu_file_states_is_measured(fake_cli, formers_file):
    cli, backend = fake_cli(FakeDevice(kind="gpu", name="fake A100", card_bytes=80 * 2**30))
    path = formers_file(("device: cpu\n", ""), ("compute_type: float32", "compute_type: bf16\nfp16_opt_level: O2"))
    code, _, err = cli("check", path, "--budget", "64MiB")
    assert code == 0 and err.startswith("note: the file's strategy: bf16-o2 m=2 k=2 r=0 (--budget 64.0 MiB)\n")
    assert backend.jobs[-1].strategy["precision"] == "bf16-o2"
    unsaid = formers_file(("device: cpu\n", ""), ("compute_type: float32", "compute_type: bf16"), name="unsaid.yaml")
    assert cli("check", unsaid, "--budget", "64MiB") == (2, "", (  # O1 or O2: its parser's default is not guessed
        f"error: {unsaid}: fp16_opt_level: is not stated: check measures the strategy the file states, as `vramtune "
        "apply` writes it, and never takes a parser's default for it (O1 or O2 with compute_type bf16)\n"))


def test_check_reads_back_the_strategy_apply_wrote(fake_cli, formers_file):
    """Whatever the search chose (here AMP and accumulation on a small card), check measures that: apply's writer is
    the one mapping both read."""
    cli, backend = fake_cli(FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5,
                                       amp_speed=2.0))
    path = formers_file(("device: cpu\n", ""), ("compute_type: float32", "compute_type: bf16"),
                        ("per_device_train_batch_size: 2", "per_device_train_batch_size: 16"))
    code, out, err = cli("apply", path, "--budget", "30MiB", "--no-recompute", "--json")
    assert code == 0, err
    chosen = {key: json.loads(out)["chosen"][key] for key in ("precision", "micro_batch", "accumulation")}
    assert chosen == {"precision": "bf16", "micro_batch": 8, "accumulation": 4}  # the file said 16 x 2
    code, out, err = cli("check", path.with_name("sft.tuned.yaml"), "--budget", "30MiB", "--json")
    measured = json.loads(out)["measured"]
    assert code == 0, err
    assert {key: measured[key] for key in chosen} == chosen == {key: backend.jobs[-1].strategy[key] for key in chosen}


@needs_paddlenlp
def test_a_paddlenlp_arguments_file_is_read_by_its_keys(fake_cli, tmp_path, monkeypatch):
    """As apply writes it back (do_train, fp16, recompute and optim stated), or with those keys left to the parser's
    defaults (which the round trip through apply's writer could not read: exit 2); keys no strategy says are named,
    exit 2."""
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    monkeypatch.chdir(tmp_path)
    arguments = {"model_name_or_path": "./tiny-llama", "output_dir": "./checkpoints", "max_length": 64,
                 "learning_rate": 3e-5, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                 "bf16": True, "fp16_opt_level": "O2"}
    stated = {"do_train": True, "fp16": False, "recompute": False, "optim": "adamw"}
    path, short, both = tmp_path / "args.json", tmp_path / "short.json", tmp_path / "both.json"
    path.write_text(json.dumps({**arguments, **stated}))
    short.write_text(json.dumps(arguments))
    both.write_text(json.dumps({**arguments, "fp16": True}))
    cli, backend = fake_cli(FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB))
    for file in (path, short):
        code, _, err = cli("check", file, "--budget", "64MiB")
        assert code == 0 and err.startswith("note: the file's strategy: bf16-o2 m=4 k=2 r=0 (--budget 64.0 MiB)\n"), \
            err
        assert backend.jobs[-1].strategy["precision"] == "bf16-o2"
    assert cli("check", both, "--budget", "64MiB") == (2, "", (
        f"error: {both}: bf16: true with fp16 true: PaddleNLP's TrainingArguments allows at most one of them\n"))
    assert cli("check", path) == (2, "", f"error: {path}: --budget: is required: the file records no budget (give "
                                         "the one it must fit, e.g. --budget 24GiB)\n")  # JSON has no comments


def test_the_overrides_the_file_was_tuned_with_and_not_given_are_said(fake_cli, formers_file):
    cli, _ = fake_cli(FakeDevice())
    path = formers_file()
    path.write_text(with_budget_line(path.read_text(), 64 * MiB, ["max_steps=2", "logging_dir=my logs"]))
    code, _, err = cli("check", path)
    assert code == 0 and err.splitlines()[:2] == [
        "note: the file's strategy: fp32 m=2 k=2 r=0 (the budget it records 64.0 MiB)",
        "note: tuned with -O max_steps=2 -O 'logging_dir=my logs' (its first line), not given here: measured without "
        "them"]
    code, _, err = cli("check", path, "max_steps=2", "-O", "logging_dir=my logs")
    assert code == 0 and "tuned with" not in err


def test_bad_input_exits_2_and_measures_nothing(fake_cli, formers_file, tmp_path):
    cli, backend = fake_cli(FakeDevice())
    path = formers_file()
    assert cli("check", path) == (2, "", f"error: {path}: --budget: is required: the file records no budget (give "
                                         "the one it must fit, e.g. --budget 24GiB)\n")
    missing = tmp_path / "absent.yaml"
    assert cli("check", missing, "--budget", "1GiB") == (2, "", f"error: {missing}: no such file\n")
    assert cli("check", path, "--budget", "40") == (2, "", (
        f"error: {path}: budget: '40' has no unit, so it is bytes, too few for any model: write 40GiB or 40MiB (40B "
        "if bytes are meant) (or 'auto' on a GPU)\n"))
    assert backend.jobs == []


EVERY_LAYER = "recompute_granularity: full\nrecompute_method: uniform\nrecompute_num_layers: 1"


def test_a_file_recomputing_every_layer_states_the_models_layers(fake_cli, formers_file):
    """The keys apply writes for any count on a model that recomputes every layer or none (the demo's 2-layer Llama):
    r=2, its config.json's num_hidden_layers, as the probe counts its blocks."""
    cli, backend = fake_cli(FakeDevice())
    path = formers_file(("sharding: \"\"", f"sharding: \"\"\n{EVERY_LAYER}"))
    code, out, err = cli("check", path, "--budget", "64MiB")
    assert (code, out) == (0, "")
    assert err.startswith("note: the file's strategy: fp32 m=2 k=2 r=2 (--budget 64.0 MiB)\nfp32 m=2 k=2 r=2: fits\n")
    assert cli("check", path, "--budget", "1MiB")[0] == 1
    assert [(job.strategy["micro_batch"], job.strategy["accumulation"], job.strategy["recomputed_blocks"])
            for job in backend.jobs] == [(2, 2, 2), (2, 2, 2)]
    # the first N by the block method: PaddleFormers' Llama recomputes nothing then, and apply leaves the keys as
    # they are when it recomputes nothing: r=0
    block = formers_file(("sharding: \"\"", "sharding: \"\"\n" + EVERY_LAYER.replace("uniform", "block")),
                         name="block.yaml")
    code, _, err = cli("check", block, "--budget", "64MiB")
    assert (code, backend.jobs[-1].strategy["recomputed_blocks"]) == (0, 0)
    assert err.startswith("note: the file's strategy: fp32 m=2 k=2 r=0 (--budget 64.0 MiB)\n")


def test_the_block_method_states_its_layer_count_where_the_model_recomputes_the_first_n(fake_cli, formers_file,
                                                                                          tmp_path):
    """A model whose code recomputes the first N layers (not one of PaddleFormers' own: a qwen3 config.json of 4
    layers here): recompute_method block with recompute_num_layers 3 is r=3; uniform with 1 is every layer, r=4."""
    cli, backend = fake_cli(FakeDevice())
    folder = tmp_path / "qwen3"
    shutil.copytree(SPECS / "formers" / "llama", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "qwen3", "num_hidden_layers": 4}))
    first = EVERY_LAYER.replace("uniform", "block").replace("layers: 1", "layers: 3")
    for keys, name in ((first, "first.yaml"), (EVERY_LAYER, "every.yaml")):
        path = formers_file(("sharding: \"\"", f"sharding: \"\"\n{keys}"), name=name)
        path.write_text(path.read_text().replace(str(SPECS / "formers" / "llama"), str(folder)))
        assert cli("check", path, "--budget", "64MiB")[0] == 0
    assert [job.strategy["recomputed_blocks"] for job in backend.jobs] == [3, 4]


def test_budget_on_a_tuned_spec_judges_that_budget_instead_of_the_tuned_one(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6))
    tuned = tmp_path / "mlp.tuned.yaml"
    assert cli("apply", CONFIGS / "mlp-python-cpu.yaml", "-o", tuned)[0] == 0
    code, out, _ = cli("check", tuned, "--json")
    assert (code, json.loads(out)["limit_bytes"]) == (0, int(40 * MiB * 0.95))  # the spec's budget: 40MiB
    code, out, _ = cli("check", tuned, "--budget", "21MiB", "--json")
    assert (code, json.loads(out)["limit_bytes"]) == (1, int(21 * MiB * 0.95))



def test_measure_without_m_or_k_measures_the_files_own_strategy(fake_cli, formers_file):
    """As check reads it (m=2 k=2 here); the strategy flags given are set over it; -k alone still needs -m."""
    cli, backend = fake_cli(FakeDevice())
    path = formers_file()
    code, out, err = cli("measure", path, "--budget", "64MiB")
    assert (code, out) == (0, "")
    assert err == ("note: the file's strategy: fp32 m=2 k=2 r=0\n"
                   "fp32 m=2 k=2 r=0: fits\n"
                   "  peak 24.0 MiB allocated (budget 64.0 MiB)\n" + MEASURED +
                   "  on fake cpu, paddle 0.0-fake\n")
    code, _, err = cli("measure", path, "--budget", "64MiB", "-r", "1")
    assert code == 0 and err.startswith("note: the file's strategy: fp32 m=2 k=2 r=0\nfp32 m=2 k=2 r=1: fits\n")
    code, _, err = cli("measure", path, "--budget", "64MiB", "-k", "2")
    assert (code, err) == (2, f"error: {path}: --micro-batch: is required with -k (give neither for the strategy "
                              "the file states)\n")
    assert [(job.strategy["micro_batch"], job.strategy["accumulation"], job.strategy["recomputed_blocks"])
            for job in backend.jobs] == [(2, 2, 0), (2, 2, 1)]


def test_a_stated_sharding_stage_is_read_over_the_files_ranks(fake_cli, formers_file):
    """sharding stage2 over sharding_parallel_size 2 (its ranks): s=2 n=2, measured on 2 GPUs (--device gpu: the file
    says cpu); --devices 1 measures one rank without the stage, and says so."""
    cli, backend = fake_cli(FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB))
    path = formers_file(("sharding: \"\"", "sharding: stage2\nsharding_parallel_size: 2"))
    code, _, err = cli("check", path, "--budget", "64MiB", "--device", "gpu")
    assert code == 0 and err.startswith("note: the file's strategy: fp32 m=2 k=2 r=0 n=2 s=2 (--budget 64.0 MiB)\n"), \
        err
    code, _, err = cli("check", path, "--budget", "64MiB", "--device", "gpu", "--devices", "1")
    assert code == 0 and err.startswith(
        "note: the file's strategy: fp32 m=2 k=2 r=0 n=2 s=2 (--budget 64.0 MiB)\n"
        "note: measured on 1 rank, tuned on 2: each rank's micro-batch and accumulation as tuned, 4 samples per step "
        "instead of 8\n"
        "note: sharding stage 2 needs 2 ranks or more: measured without it, and without data parallel's gradient "
        "buffers, so a pass may not hold on the tuned ranks\n"), err
    assert [(job.strategy["devices"], job.strategy["sharding_stage"]) for job in backend.jobs] == [(2, 2), (1, 0)]


def test_the_configs_own_overrides_apply_to_the_spec_it_measures(fake_cli, formers_file):
    """-O KEY=VALUE and KEY=VALUE after the file, as apply took them: a check without them measures another job."""
    cli, backend = fake_cli(FakeDevice())
    path = formers_file()
    assert cli("check", path, "--budget", "64MiB")[0] == 0
    plain = backend.jobs[-1]
    assert (plain.model["seq_len"], plain.learning_rate) == (128, 1.0e-4)
    code, out, err = cli("check", path, "--budget", "64MiB", "-O", "max_seq_len=16", "learning_rate=0.5")
    assert (code, out) == (0, "")
    assert err == ("note: the file's strategy: fp32 m=2 k=2 r=0 (--budget 64.0 MiB)\n"
                   "fp32 m=2 k=2 r=0: fits\n"
                   "  peak 24.0 MiB allocated (budget 64.0 MiB)\n" + MEASURED +
                   "  on fake cpu, paddle 0.0-fake\n"
                   "check: pass\n")
    job = backend.jobs[-1]
    assert (job.model["seq_len"], job.model["arguments"]["max_seq_len"], job.learning_rate) == (16, 16, 0.5)
    assert (job.strategy["micro_batch"], job.strategy["accumulation"]) == (2, 2)


def test_overrides_on_a_vramtune_spec_are_bad_input(fake_cli):
    cli, backend = fake_cli(FakeDevice())
    spec = CONFIGS / "mlp-python-cpu.yaml"
    code, out, err = cli("check", spec, "-O", "train.steps=2")
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == f"error: {spec}: " + OPTIONS_ELSEWHERE + "\n"


def test_the_budget_line_apply_writes_names_the_overrides_check_needs(fake_cli, formers_file, tmp_path):
    cli, backend = fake_cli(FakeDevice())
    tuned = tmp_path / "sft.tuned.yaml"
    code, _, err = cli("apply", formers_file(), "--budget", "64MiB", "-o", tuned, "learning_rate=0.5",
                         "max_seq_len=16")
    assert code == 0, err
    assert tuned.read_text().splitlines()[0] == (
        "# vramtune: tuned for a budget of 64.0 MiB (67108864 bytes); `vramtune check FILE -O learning_rate=0.5 "
        "-O max_seq_len=16` gates it in CI")
    code, _, err = cli("check", tuned, "-O", "learning_rate=0.5", "-O", "max_seq_len=16")
    assert code == 0 and err.startswith("note: the file's strategy: fp32 m=4 k=1 r=0 (the budget it records "
                                        "64.0 MiB)\n")
    job = backend.jobs[-1]
    assert (job.model["seq_len"], job.learning_rate, job.strategy["micro_batch"]) == (16, 0.5, 4)
