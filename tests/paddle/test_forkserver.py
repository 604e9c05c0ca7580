"""The warm worker (child/forkserver.py): CPU probes forked from a server that imported Paddle once measure what a
fresh process measures, to the byte, and keep every guarantee of one process per probe."""
from __future__ import annotations

import contextlib
import os
import select
from pathlib import Path

import pytest
from conftest import CONFIGS, HUNG, needs_paddlenlp

from vramtune.core.records import Budget
from vramtune.core.strategy import Strategy
from vramtune.probing.runner import ChildBackend
from vramtune.spec import Spec, load_spec
from vramtune.tuning.session import job_for

pytestmark = pytest.mark.paddle


def measure_both_ways(spec_path: Path, strategy: Strategy, monkeypatch) -> tuple:
    spec = load_spec(spec_path)
    backend = ChildBackend()
    device = backend.describe("cpu")
    budget = Budget(spec.budget, spec.headroom)
    job = job_for(spec, strategy, device, budget)
    monkeypatch.setenv("VRAMTUNE_FORK", "0")
    fresh = backend.measure(job, 120, budget)
    monkeypatch.setenv("VRAMTUNE_FORK", "1")
    forked = [backend.measure(job, 120, budget) for _ in range(2)]
    backend.fork_server.close()
    return fresh, forked


@pytest.mark.parametrize("config, strategy", [
    ("mlp-python-cpu.yaml", Strategy(micro_batch=256, accumulation=8)),
    pytest.param("bert-mini-cpu.yaml", Strategy(micro_batch=8, accumulation=4, recomputed_blocks=4),
                 marks=needs_paddlenlp),
])
@pytest.mark.slow(14)
def test_a_forked_probe_measures_the_peak_of_a_fresh_process_to_the_byte(config, strategy, monkeypatch):
    fresh, forked = measure_both_ways(CONFIGS / config, strategy, monkeypatch)
    assert fresh.status == "measured" and fresh.phases["import"] > 0.3, fresh  # a fresh process imports Paddle
    for result in forked:
        assert result.status == "measured", result
        assert (result.peak_bytes, result.weight_bytes, result.optimizer_bytes) == \
            (fresh.peak_bytes, fresh.weight_bytes, fresh.optimizer_bytes)
        assert result.phases["import"] < 0.3 * fresh.phases["import"], (result.phases, fresh.phases)


def factory_spec(tmp_path: Path, body: str) -> Path:
    """A spec whose factory runs `body` (with os, time and paddle imported, FILE its record) when a probe builds."""
    (tmp_path / "model.py").write_text(
        "import os, time, paddle\n"
        f"FILE = {str(tmp_path / 'record')!r}\n"
        "def build():\n" + "".join(f"    {line}\n" for line in body.splitlines()) +
        "    return paddle.nn.Linear(4, 2)\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: {source: python, factory: 'model:build'}\n"
                    "data: {inputs: [{shape: [4]}], labels: {shape: [], dtype: int64, high: 2}}\n"
                    "train: {target_batch: 4}\ndevice: cpu\nbudget: 64MiB\nprobe: {steps: 1, warmup: 1}\n")
    return spec


def probe_each(spec: Spec, micro_batches: tuple[int, ...]) -> int:
    """Measure the spec at each micro-batch (accumulated to 4) through one warm worker, then close it; its pid."""
    backend = ChildBackend()
    device = backend.describe("cpu")
    budget = Budget(spec.budget, 0.05)
    for micro in micro_batches:
        job = job_for(spec, Strategy(micro_batch=micro, accumulation=4 // micro), device, budget)
        assert backend.measure(job, 60, budget).status == "measured"
    server = backend.fork_server.process.pid
    backend.fork_server.close()
    return server


def test_each_forked_probe_is_a_process_of_its_own_in_a_session_of_its_own(tmp_path, monkeypatch):
    """The worker reports its pid and session through a factory that writes them down: two probes, two processes,
    neither the server, each leading its own session."""
    who = "open(FILE, 'a').write(f'{os.getpid()} {os.getsid(0)} {os.getppid()}\\n')"
    server = probe_each(load_spec(factory_spec(tmp_path, who)), (4, 2))
    rows = [tuple(map(int, line.split())) for line in (tmp_path / "record").read_text().splitlines()]
    assert len({pid for pid, _, _ in rows}) == 2 and all(sid == pid for pid, sid, _ in rows)
    assert all(parent == server != pid for pid, _, parent in rows) and os.getpid() not in {r[0] for r in rows}


def test_a_forked_probe_collects_its_own_garbage_and_none_of_the_servers_objects(tmp_path):
    """The server imports with the garbage collector off and freezes what it imported before each fork: a probe
    runs with the collector on, and Paddle's objects (over 200,000 on import) frozen, out of every generation its
    collections walk; fresh objects of its own are collected."""
    spec = load_spec(factory_spec(tmp_path, "import gc\n"
                                            "open(FILE, 'a').write(f'{gc.isenabled()} {gc.get_freeze_count()}\\n')"))
    probe_each(spec, (4, 2))
    rows = [line.split() for line in (tmp_path / "record").read_text().splitlines()]
    assert [enabled for enabled, _ in rows] == ["True", "True"] and all(int(frozen) > 200_000 for _, frozen in rows)


def test_measure_verbose_says_where_the_probe_time_went(cli):
    code, _, err = cli("measure", CONFIGS / "mlp-python-cpu.yaml", "--micro-batch", 256, "--verbose")
    assert code == 0, err
    line = err.splitlines()[-1].split()
    assert line[0::2] == ["import", "build", "prepare", "shape_check", "warmup", "steps", "after", "rest"], err
    assert all(value.endswith("s") and float(value[:-1]) >= 0 for value in line[1::2])


def test_a_probe_is_answered_once_its_result_is_written_and_gone_before_the_next_starts(tmp_path):
    """The server answers as soon as a probe's result is on disk (its exit overlaps the parent's reading), and reaps
    it before it forks the next probe: each probe finds every earlier probe gone from /proc, not even a zombie."""
    spec = load_spec(factory_spec(tmp_path, "earlier = open(FILE).read().split() if os.path.exists(FILE) else []\n"
                                            "alive = [p for p in earlier if os.path.exists(f'/proc/{p}')]\n"
                                            "open(FILE, 'a').write(f'{os.getpid()} {len(alive)}\\n')"))
    probe_each(spec, (4, 2, 1))
    rows = [line.split() for line in (tmp_path / "record").read_text().splitlines()]
    assert len({pid for pid, _ in rows}) == 3 and [alive for _, alive in rows] == ["0", "0", "0"], rows


def test_a_probe_that_dies_without_a_result_is_answered_when_it_dies_not_when_its_children_do(tmp_path):
    """A probe that leaves a child holding what it would announce its result on, then dies: its exit code is
    answered at once, and the child, which would sleep past the probe's timeout, is ended with the probe's session
    (a fork without exec shows the server's environment in /proc, without the probe's marker: before, it outlived
    the test by 2 x HUNG): a probe answered when its child ended would have timed out."""
    spec = load_spec(factory_spec(tmp_path, "child = os.fork()\n"
                                            "if child == 0:\n"
                                            f"    time.sleep({2 * HUNG})\n"
                                            "    os._exit(0)\n"
                                            "open(FILE, 'w').write(str(child))\n"
                                            "os._exit(3)"))
    backend = ChildBackend()
    device = backend.describe("cpu")
    budget = Budget(spec.budget, 0.05)
    job = job_for(spec, Strategy(micro_batch=4), device, budget)
    result = backend.measure(job, HUNG, budget)
    backend.fork_server.close()
    assert result.status == "crashed" and result.error.startswith("exit code 3 without a result"), result
    assert result.seconds < HUNG, result
    child = int((tmp_path / "record").read_text())
    with contextlib.suppress(ProcessLookupError):  # gone already; else it must end (SIGKILLed), not sleep on
        ended = os.pidfd_open(child)
        assert select.select([ended], [], [], HUNG)[0], f"the probe's child {child} outlived it"
        os.close(ended)


@needs_paddlenlp
def test_a_server_preloaded_with_the_models_packages_forks_probes_that_measure_the_same(monkeypatch):
    """The estimate's second server imports PaddleNLP ahead of its first probe (ForkServer.preload): its answer is
    read before the probe's, and the probes it forks measure what a fresh process does."""
    spec = load_spec(CONFIGS / "bert-mini-cpu.yaml")
    backend = ChildBackend()
    device = backend.describe("cpu")
    budget = Budget(spec.budget, spec.headroom)
    job = job_for(spec, Strategy(micro_batch=4, accumulation=2), device, budget)
    monkeypatch.setenv("VRAMTUNE_FORK", "0")
    fresh = backend.measure(job, 120, budget)
    monkeypatch.setenv("VRAMTUNE_FORK", "1")
    backend.preload(spec.source)
    assert backend.fork_server.preloading
    preloaded = [backend.measure(job, 120, budget) for _ in range(2)]
    assert not backend.fork_server.preloading
    backend.fork_server.close()
    assert fresh.status == "measured", fresh
    assert [(r.status, r.peak_bytes) for r in preloaded] == [("measured", fresh.peak_bytes)] * 2
