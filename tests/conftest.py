"""Shared fixtures: a hermetic CLI runner, a private results cache, and paths to the shipped configs."""
from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
import types
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramtune.cli import app, make_app

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
SPECS = Path(__file__).resolve().parent / "specs"
FAULTS = Path(__file__).resolve().parent / "faults"
HUNG = 1800  # seconds after which a wait for an event (a process's start, end or output) or a run of real work (a
# probe, a search, a kit's or a Trainer's training) is a hang: a bound for failing only, whatever the machine's load (a
# passing one ends on its event, long before; CI's limit is 90 minutes for the whole suite)


# A suite started in the background by a script (no job control) inherits SIGINT ignored, and so would every
# vramtune it starts: the Ctrl-C tests (tests/paddle/test_faults.py) would then wait for an interrupt that never
# comes. Ctrl-C is the user's, at a terminal: give the tests' processes its default.
# Likewise `nohup` (or a CI runner that detaches) starts it with SIGHUP ignored: the closed-terminal tests
# (tests/paddle/test_signals.py, tests/fast/test_interrupts.py) need the default a terminal's child has.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def hangup_default() -> None:
    """In a child about to exec (subprocess.Popen's preexec_fn): SIGHUP's default. A suite started under nohup
    inherits SIGHUP ignored, and vramtune keeps an ignored SIGHUP ignored (nohup's point): the SIGHUP tests'
    runs (tests/paddle/test_signals.py) would go on after their hangup. The suite itself keeps nohup's."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# Each NLP stack lives in its own environment (docs/environments.md); make test runs both.
needs_paddlenlp = pytest.mark.skipif(importlib.util.find_spec("paddlenlp") is None,
                                     reason="PaddleNLP is not installed: it lives in .venv26 (Paddle 2.6.2), "
                                            "where make test runs this")
needs_paddleformers = pytest.mark.skipif(importlib.util.find_spec("paddleformers") is None,
                                         reason="PaddleFormers is not installed: it lives in .venv (Paddle 3.x), "
                                                "where make test runs this")


def paddle_version() -> str:
    """The installed Paddle's version (the CPU or the GPU wheel), read without importing Paddle."""
    for name in ("paddlepaddle", "paddlepaddle-gpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(name)
    return ""


@functools.cache
def gpu_present() -> bool:
    """Whether Paddle here sees a GPU (asked in a child: the test process never imports Paddle for this)."""
    done = subprocess.run([sys.executable, "-c", "import paddle; print(paddle.is_compiled_with_cuda() and "
                           "paddle.device.cuda.device_count() > 0)"], capture_output=True, text=True, timeout=HUNG)
    return done.stdout.strip().endswith("True")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, the slowest first (their `slow` marker's CPU seconds), the rest in collection order:
    pytest-xdist hands tests out in this order, so the long ones start at once and the short ones fill the workers
    around them, instead of a long one started last running alone at the end."""
    def cost(item: pytest.Item) -> float:
        marker = item.get_closest_marker("slow")
        return -marker.args[0] if marker else 0
    items.sort(key=cost)


@pytest.fixture(scope="session")
def once(tmp_path_factory):
    """once(name, compute) -> compute()'s answer (JSON), computed once in the whole run: by the first test that
    asks, in whichever pytest-xdist worker; the others wait for it, then read it. For a measurement several tests
    read and none changes (each still asserts on it; the one that computes it fails when it fails)."""
    run = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run = run.parent  # the run's folder, shared by its workers
    folder = run / "once"
    folder.mkdir(exist_ok=True)

    def get(name: str, compute):
        answer = folder / f"{name}.json"
        with open(folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not answer.exists():
                answer.write_text(json.dumps(compute()))
        return json.loads(answer.read_text())
    return get


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test gets its own .vramtune/ and device locks, and finds the example and fault factories on
    PYTHONPATH."""
    monkeypatch.setenv("VRAMTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VRAMTUNE_LOCKS", str(tmp_path / "locks"))
    paths = [str(CONFIGS), str(FAULTS), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    return tmp_path / "cache"


@pytest.fixture
def steady_speed(monkeypatch):
    """Timing taken out of a real search run through the in-process `cli`: every measured throughput is replaced by
    a fixed model of a quiet CPU (each recomputed block costs 5%; micro-batch, accumulation and to_static change
    nothing, so ties go to the simpler configuration). Peaks stay measured: only which configuration wins no longer
    depends on the machine's load."""
    import dataclasses

    from vramtune.probing import runner

    measured = runner.result_from

    def steady(job, outcome, seconds):
        result = measured(job, outcome, seconds)
        if not result.samples_per_sec:
            return result
        speed = 1000.0 * (1 - 0.05 * result.strategy.recomputed_blocks)
        return dataclasses.replace(result, samples_per_sec=speed, step_seconds=result.strategy.batch / speed)
    monkeypatch.setattr(runner, "result_from", steady)


class ReadyClock:
    """The clock a probe's timeout is counted on, standing still until `marker` exists (the probe writes it once it
    is where the test wants it ended: hanging), then running: the timeout is the time the probe gets from there, a
    loaded machine's start-up (importing Paddle, launching ranks) never uses it up. Everything else stays real. A
    marker never written starts the clock after HUNG seconds: the test fails, it does not hang."""

    def __init__(self, marker: Path):
        self.marker, self.paused_at, self.ready_at = marker, time.monotonic(), None

    def monotonic(self) -> float:
        now = time.monotonic()
        if self.ready_at is None:
            if not self.marker.exists() and now - self.paused_at < HUNG:
                return self.paused_at
            self.ready_at = now
        return self.paused_at + now - self.ready_at

    def select(self, readers: list, writers: list, errors: list, wait: float | None = None) -> tuple:
        """select.select, its `wait` counted on this clock."""
        if wait is None:
            return select.select(readers, writers, errors)
        until = self.monotonic() + wait
        while not any(ready := select.select(readers, writers, errors, 0.05)) and self.monotonic() < until:
            pass
        return ready

    def popen(self) -> type[subprocess.Popen]:
        """subprocess.Popen whose wait(timeout) counts the timeout on this clock."""
        clock = self

        class Popen(subprocess.Popen):
            def wait(self, timeout: float | None = None) -> int:
                if timeout is None:
                    return super().wait()
                until = clock.monotonic() + timeout
                while (code := self.poll()) is None:
                    if clock.monotonic() >= until:
                        raise subprocess.TimeoutExpired(self.args, timeout)
                    time.sleep(0.05)
                return code
        return Popen


@pytest.fixture
def timeout_from(monkeypatch):
    """timeout_from(marker): the in-process CLI's probes count their timeout from when `marker` exists (ReadyClock),
    forked from the warm server (probing/forking.py) or started as a process (a launcher's, probing/runner.py)."""
    from vramtune.probing import forking, runner

    def start(marker: Path) -> None:
        clock = ReadyClock(marker)
        monkeypatch.setattr(forking, "time", types.SimpleNamespace(monotonic=clock.monotonic))
        monkeypatch.setattr(forking, "select", types.SimpleNamespace(select=clock.select))
        monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(**{**vars(subprocess), "Popen": clock.popen()}))
    return start


def invoker(application):
    """Run a CLI app in-process: a function of the arguments returning (exit code, stdout, stderr)."""
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(application, [str(a) for a in args], catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr
    return invoke


@pytest.fixture
def cli():
    """The real CLI (probes in Paddle children), in-process."""
    return invoker(app)


@pytest.fixture
def fake_cli():
    """fake_cli(device[, missing]) -> (invoke, backend): the CLI over a fake device, no Paddle."""
    from fakes import FakeBackend

    def make(device, missing=None):
        backend = FakeBackend(device, missing)
        return invoker(make_app(backend)), backend
    return make


@pytest.fixture
def write_spec(tmp_path):
    """Write a spec (a dict, or YAML text) to a file and return its path."""
    def write(content, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path
    return write


def mlp_spec(**changes) -> dict:
    """The shipped python MLP spec as a dict, with dotted-key changes (None removes a key)."""
    spec = yaml.safe_load((CONFIGS / "mlp-python-cpu.yaml").read_text())
    for dotted, value in changes.items():
        node = spec
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return spec


def formers_demo(folder: Path, *edits: tuple[str, str], name: str = "sft.yaml") -> Path:
    """The demo PaddleFormers config (configs/formers-sft-lora-cpu.yaml), its model folder absolute, each (old, new)
    replaced, written in `folder` (its data absent: no Paddle reads it in the fast tests); its path."""
    text = (CONFIGS / "formers-sft-lora-cpu.yaml").read_text().replace("./tests/specs/formers/llama",
                                                                        str(SPECS / "formers" / "llama"))
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text)
    return path


def fault_spec(mode: str, lo: int = 1, hi: int = 1 << 30, timeout: float = HUNG, budget="64MiB", **more) -> dict:
    """A tiny model from tests/faults that misbehaves (`mode`) for micro-batches in (lo, hi]."""
    spec = {
        "name": f"fault-{mode}",
        "model": {"source": "python", "factory": "fault_models:build", "kwargs": {"mode": mode, "lo": lo, "hi": hi}},
        "data": {"inputs": [{"shape": [32], "dtype": "float32"}], "labels": {"shape": [], "dtype": "int64", "high": 4}},
        "train": {"target_batch": 64},
        "device": "cpu",
        "budget": budget,
        "probe": {"steps": 1, "warmup": 1, "timeout": timeout},
    }
    for key, value in more.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return spec
