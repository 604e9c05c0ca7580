"""Tensor parallelism (with sequence parallelism) as a mechanism, no Paddle: the strategy's fields, the ranks a probe
launches, PaddleFormers' keys read and written back unchanged, `measure` probing the file's layout (the CPU
stand-ins said), `probe` and `apply` searching at the file's degree and writing it back (the workflow's verification
left to the user's launch, said), and the refusals with their exact messages and exit codes: a device kind or Paddle
that cannot run it. The 2-rank probe itself: tests/paddle/test_measure_tensor_parallel.py."""
from __future__ import annotations

import json

import pytest
import yaml
from conftest import SPECS
from fakes import FakeDevice, MiB

from vramtune.core.reading import SpecError
from vramtune.core.records import Device
from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.dialects.paddleformers.codec import to_formers
from vramtune.dialects.paddleformers.stated import stated
from vramtune.mechanisms.tensor_parallel import CPU_NOTE
from vramtune.probing.ranks import launcher
from vramtune.spec import load_spec

LLAMA = SPECS / "formers" / "llama"
KEYS = {"train_dataset_type": "erniekit", "max_seq_len": 128, "model_name_or_path": str(LLAMA),
        "continue_training": False, "stage": "SFT", "fine_tuning": "full", "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1, "output_dir": "./out", "device": "cpu", "compute_type": "float32",
        "amp_master_grad": False, "_attn_implementation": "eager", "sharding": "", "max_grad_norm": 0.0}
NOT_VERIFIED = ('not verified by the file\'s own tool: the workflow trains it on 2 ranks, and vramtune runs it on one '
                'process only yet: name the launch that trains it to verify it, --verify-with "python -m '
                'paddle.distributed.launch --nproc_per_node 2 -m paddleformers.cli.launcher train {file}"')


def formers_file(tmp_path, **keys):
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump({**KEYS, **keys}, sort_keys=False))
    return path


def small():
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6)


def test_the_strategy_says_its_degree_and_launches_its_ranks():
    strategy = Strategy(micro_batch=4, tensor_parallel=2, sequence_parallel=True)
    assert (strategy.label(), strategy.ranks, strategy.batch) == ("fp32 m=4 k=1 r=0 tp=2 sp", 2, 4)
    assert Strategy.from_json(strategy.to_json()) == strategy
    assert Strategy.from_json({}).tensor_parallel == 1  # results saved before the field read as without it
    device = Device("cpu", 0, "cpu", 1 << 30, "3.3.1")
    launch = launcher(strategy, device, ["--job", "JOB"], {})
    assert launch.ranks == 2 and launch.argv[launch.argv.index("--nproc_per_node") + 1] == "2"
    assert launcher(Strategy(micro_batch=4), device, [], {}) is None


@pytest.mark.parametrize(("keys", "degree", "sequence"), [
    ({"tensor_model_parallel_size": 2}, 2, False),
    ({"tensor_model_parallel_size": 2, "sequence_parallel": True}, 2, True),
    ({"tensor_model_parallel_size": -1}, 1, False), ({}, 1, False)])
def test_the_formers_keys_are_read_and_written_back_unchanged(tmp_path, keys, degree, sequence):
    path = formers_file(tmp_path, **keys)
    spec = load_spec(path, read_data=False)
    assert spec.settings["tensor_parallel"].degree == degree
    assert spec.settings["tensor_parallel"].sequence is sequence
    strategy = stated(spec, "cpu")
    assert (strategy.tensor_parallel, strategy.sequence_parallel) == (degree, sequence)
    written = to_formers(yaml.safe_load(path.read_text()), Tuned(strategy, device_kind="cpu"))
    assert {key: written[key] for key in keys if key in written} == {k: v for k, v in keys.items() if degree > 1}
    if degree == 1:
        assert "tensor_model_parallel_size" not in written and "sequence_parallel" not in written


def test_sequence_parallel_needs_tensor_parallelism(tmp_path):
    path = formers_file(tmp_path, sequence_parallel=True)
    with pytest.raises(SpecError) as refused:
        load_spec(path, read_data=False)
    assert [str(problem) for problem in refused.value.problems] == [
        f"{path}: sequence_parallel: true needs tensor parallelism: set tensor_model_parallel_size above 1 (or "
        "sequence_parallel: false)"]


def test_sequence_parallel_measures_max_seq_len(tmp_path):
    """The workflow pads every row to max_seq_len with sequence parallelism (run_sft), as with packing."""
    spec = load_spec(formers_file(tmp_path, tensor_model_parallel_size=2, sequence_parallel=True,
                                  train_dataset_path=str(SPECS / "formers" / "sft.jsonl"), max_seq_len=96))
    assert (spec.model.seq_len, spec.model.seq_note, spec.model.padded_to_max) == (
        96, "sequence length 96: max_seq_len (with sequence parallelism the workflow pads every row to it)", True)


def test_probe_and_apply_search_at_the_files_degree_and_write_it_back_unchanged(fake_cli, tmp_path):
    cli, backend = fake_cli(small())
    path = formers_file(tmp_path, tensor_model_parallel_size=2, sequence_parallel=True)
    code, out, err = cli("probe", path, "--budget", "1GiB", "--json")
    assert code == 0, err
    assert f"note: {CPU_NOTE}\n" in err
    strategies = [Strategy.from_json(job.strategy) for job in backend.jobs]
    assert strategies and {(s.tensor_parallel, s.sequence_parallel) for s in strategies} == {(2, True)}
    assert json.loads(out)["chosen"]["tensor_parallel"] == 2
    code, out, err = cli("apply", path, "--budget", "1GiB", "-o", "-")
    assert code == 0, err
    written = yaml.safe_load(out)
    assert (written["tensor_model_parallel_size"], written["sequence_parallel"]) == (2, True)
    assert NOT_VERIFIED in err.replace("\n", " ")  # the workflow under the launch: the user's command


def test_measure_probes_the_files_layout_and_says_the_stand_ins(fake_cli, tmp_path):
    cli, backend = fake_cli(small())
    path = formers_file(tmp_path, tensor_model_parallel_size=2, sequence_parallel=True)
    code, out, err = cli("measure", path, "--json")
    assert code == 0, err
    assert [Strategy.from_json(job.strategy).label() for job in backend.jobs] == ["fp32 m=4 k=1 r=0 tp=2 sp"]
    assert f"note: {CPU_NOTE}\n" in err
    assert json.loads(out)["tensor_parallel"] == 2
    path = formers_file(tmp_path, tensor_model_parallel_size=2)
    code, out, err = cli("measure", path, "-m", "2", "--sequence-parallel", "--json")  # the flags over the file
    assert code == 0, err
    assert Strategy.from_json(backend.jobs[-1].strategy).label() == "fp32 m=2 k=2 r=0 tp=2 sp"


@pytest.mark.parametrize(("device", "why"), [
    (FakeDevice(kind="xpu", name="fake xpu"), "tensor parallelism is probed on a GPU (NCCL) or a CPU (gloo) only, "
                                              "not on xpu"),
    (FakeDevice(kind="gpu", name="fake gpu", card_bytes=8 << 30), "2 ranks need 2 GPUs from gpu:0; this machine has "
                                                                  "1")])
def test_measure_refuses_a_device_that_cannot_run_it_by_name(fake_cli, tmp_path, monkeypatch, device, why):
    cli, backend = fake_cli(device)
    if device.kind == "gpu":
        monkeypatch.setattr(FakeDevice, "device", lambda self: Device("gpu", 0, self.name, self.card_bytes, "3.3.1",
                                                                      count=1))
    path = formers_file(tmp_path, tensor_model_parallel_size=2, device=None)  # the device found: the fake one
    for command in ("measure", "probe", "apply"):
        code, _, err = cli(command, path, "--budget", "1GiB")
        assert (code, backend.jobs) == (2, [])
        assert err.endswith(f"error: {path}: tensor_model_parallel_size: 2: {why}\n"), err


def test_measure_refuses_a_paddle_without_it(fake_cli, tmp_path, monkeypatch):
    cli, backend = fake_cli(small())
    monkeypatch.setattr(FakeDevice, "device", lambda self: Device("cpu", 0, self.name, self.card_bytes, "2.6.2"))
    path = formers_file(tmp_path, tensor_model_parallel_size=2)
    code, _, err = cli("measure", path, "--tensor-parallel", "2")
    assert (code, backend.jobs) == (2, [])
    assert err.endswith(f"error: {path}: --tensor-parallel: 2: tensor parallelism needs Paddle 3.0 or later (fleet's "
                        "tensor-parallel layers and ops as PaddleFormers uses them); this is Paddle 2.6.2\n"), err
