"""`vramtune measure` (and `probe`, `apply`) of a PaddleFormers file with tensor_model_parallel_size 2, for real: 2
CPU ranks under `python -m paddle.distributed.launch` (gloo), the tensor-parallel mechanism's CPU stand-ins in its
probe child only, every rank's peak from its own counters; beside bench/parallel/rank.py's 2-rank run of the same
model and batch shape (bench/parallel_ranks.py, which also runs PaddleFormers' own workflow under the same launch:
--workflow tp2). Each launch is waited on to its end, bounded only by HUNG (a hang fails); nothing here is timed."""
from __future__ import annotations

import json
import sys

import pytest
from conftest import CONFIGS, HUNG, ROOT, needs_paddleformers

from vramtune.mechanisms.tensor_parallel import CPU_NOTE

pytestmark = [pytest.mark.paddle, needs_paddleformers]
sys.path.insert(0, str(ROOT / "bench"))

from parallel_ranks import LAYOUTS, measure  # noqa: E402

LONGEST = 78  # the longest sample of tests/specs/formers/sft.jsonl the workflow keeps at max_seq_len 128


def tp2_file(folder, sequence: bool = False):
    """configs/formers-sft-lora-cpu.yaml as full fine-tuning with tensor_model_parallel_size 2, as bench/
    parallel_ranks.py's workflow trains it."""
    text = (CONFIGS / "formers-sft-lora-cpu.yaml").read_text()
    for old, new in (("lora: true", "lora: false"), ("lora_rank: 8", ""), ("fine_tuning: lora", "fine_tuning: full")):
        text = text.replace(old, new)
    path = folder / "tp2.yaml"
    path.write_text(text + "tensor_model_parallel_size: 2\nmax_grad_norm: 0.0\n"
                    + ("sequence_parallel: true\n" if sequence else ""))
    return path


@pytest.mark.slow(40)
def test_measure_runs_two_tensor_parallel_ranks_as_the_bench_measures_them(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the file's paths are the repository's
    path = tp2_file(tmp_path)
    code, out, err = cli("measure", path, "--device", "cpu", "--probe-timeout", HUNG, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert f"note: {CPU_NOTE}\n" in err and "tp=2" in err
    assert (result["tensor_parallel"], result["devices"]) == (2, 1)
    peaks = result["rank_peak_bytes"]
    assert len(peaks) == 2 and peaks[0] == peaks[1]  # one model split in two: the same bytes on both ranks
    # every rank builds half the matmuls and the vocabulary, the norms whole: 60,480 of the 120,640 parameters
    assert (result["total_params"], result["weight_bytes"]) == (60_480, 60_480 * 4)
    bench = measure(LAYOUTS["tp2"][0], 2, {}, sys.executable, micro_batch=4, seq=LONGEST)
    assert [report["peak"] for report in bench] == [bench[0]["peak"]] * 2
    assert peaks[0] / bench[0]["peak"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.slow(30)
def test_probe_and_apply_keep_the_files_degree(cli, tmp_path, monkeypatch):
    """The search keeps the file's degree: its whole batch fits a generous budget at tp 2, in one 2-rank probe; apply
    writes the degree back as it was and leaves the workflow's check to the launch that trains it (said)."""
    monkeypatch.chdir(ROOT)
    path = tp2_file(tmp_path)
    code, out, err = cli("probe", path, "--device", "cpu", "--budget", "64MiB", "--probe-timeout", HUNG, "--fresh",
                         "--json")
    assert code == 0, err
    report = json.loads(out)
    assert f"note: {CPU_NOTE}\n" in err
    assert (report["chosen"]["tensor_parallel"], report["chosen"]["micro_batch"]) == (2, 4)
    assert [len(probe["rank_peak_bytes"]) for probe in report["probes"]] == [2] * len(report["probes"])
    out = tmp_path / "tuned.yaml"  # apply: the saved probe's choice, the degree written back as it was
    code, _, err = cli("apply", path, "--device", "cpu", "--budget", "64MiB", "-o", out)
    assert code == 0, err
    assert "tensor_model_parallel_size: 2\n" in out.read_text() and "--nproc_per_node 2" in err
