"""vramtune/interrupts.py in this process (no Paddle): which signals interrupt, the exit codes, a second signal
during the wind-down, appends held whole; and a probe saved just before an interrupt is in the partial report.
The real signals to a real run are in tests/paddle/test_signals.py."""
from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import CONFIGS
from fakes import FakeDevice, MiB

from vramtune.probing import interrupts
from vramtune.probing.store import ResultStore


@pytest.fixture
def installed():
    """interrupts.install() in the test process; its handlers and the received signals restored after."""
    previous = {signum: signal.getsignal(signum) for signum in interrupts.HANDLED}
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as at a terminal: install() keeps a nohup's ignored SIGHUP ignored
    interrupts.install()
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    interrupts.received.clear()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_raises_interrupted_and_sets_the_exit_code(installed, sig, code):
    with pytest.raises(KeyboardInterrupt) as raised:
        os.kill(os.getpid(), sig)
    assert isinstance(raised.value, interrupts.Interrupted) and raised.value.signum == sig
    assert interrupts.exit_code() == code


def test_a_second_signal_is_noted_and_does_not_cut_the_wind_down(installed):
    with pytest.raises(interrupts.Interrupted):
        os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)  # e.g. an impatient Ctrl-C while the summary prints: nothing raised
    assert interrupts.received == [signal.SIGTERM, signal.SIGINT] and interrupts.exit_code() == 143


def test_without_a_signal_a_keyboard_interrupt_exits_130():
    assert interrupts.received == [] and interrupts.exit_code() == 130


def test_run_exits_with_the_signals_code_whatever_the_command_ended_with(installed):
    def failing_to_write() -> None:  # a wind-down whose output fails after the signal (a terminal gone)
        try:
            os.kill(os.getpid(), signal.SIGHUP)
        finally:
            raise OSError(5, "Input/output error")

    with pytest.raises(SystemExit) as exited:
        interrupts.run(failing_to_write)
    assert exited.value.code == 129
    # a signal during Python's exit would have its default effect (and its own exit code): ignored from here on
    assert all(signal.getsignal(signum) is signal.SIG_IGN for signum in interrupts.HANDLED)


def test_run_without_a_signal_passes_the_commands_exit_on(installed):
    def nothing_fits() -> None:
        raise SystemExit(1)

    with pytest.raises(SystemExit) as exited:
        interrupts.run(nothing_fits)
    assert exited.value.code == 1


def test_an_append_is_whole_before_the_signal_is_handled(installed, tmp_path, monkeypatch):
    """A signal that arrives during the append waits for its end: the line is whole and synced, then the run is
    interrupted."""
    from vramtune.core.records import ProbeResult
    from vramtune.core.strategy import Strategy

    store = ResultStore("key", root=tmp_path)
    original = os.fsync

    def signalled_fsync(descriptor: int) -> None:  # the signal arrives mid-append, before the sync
        os.kill(os.getpid(), signal.SIGTERM)
        original(descriptor)

    monkeypatch.setattr(os, "fsync", signalled_fsync)
    with pytest.raises(interrupts.Interrupted):
        store.save(ProbeResult("fits", Strategy(micro_batch=4)))
    monkeypatch.undo()
    assert list(store.load()) == [Strategy(micro_batch=4)]


def test_a_probe_saved_as_the_signal_arrives_is_in_the_partial_report(installed, fake_cli, monkeypatch,
                                                                     private_cache):
    """SIGTERM arrives while the second probe is being saved: it is handled once the probe is saved and noted, so
    the partial report has both probes, as the store does."""
    original = ResultStore.save

    def save_signalled(store: ResultStore, result) -> None:
        if len(store.load()) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        original(store, result)
    monkeypatch.setattr(ResultStore, "save", save_signalled)
    cli, _ = fake_cli(FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6))
    code, out, err = cli("probe", CONFIGS / "mlp-python-cpu.yaml", "--json")
    assert code == 130, err  # in-process; the console script's interrupts.run makes it 143
    assert len(json.loads(out)["probes"]) == 2, err
    assert "\ninterrupted after 2 probe(s): finished probes are saved; run again to resume\n" in err
    (saved,) = private_cache.glob("*/probes.jsonl")
    assert len(saved.read_text().splitlines()) == 2


def test_a_probe_that_answered_holds_the_signal_until_the_block_ends(installed):
    order = []
    with pytest.raises(interrupts.Interrupted), interrupts.until_saved():
        interrupts.answered()  # the probe is over: its result waits for its save
        os.kill(os.getpid(), signal.SIGTERM)
        order.append("saved")
    assert order == ["saved"] and interrupts.received == [signal.SIGTERM]


def test_before_its_probe_answered_the_signal_interrupts_at_once(installed):
    order = []
    with pytest.raises(interrupts.Interrupted), interrupts.until_saved():
        os.kill(os.getpid(), signal.SIGINT)  # the probe is still running: it is ended, nothing to save
        order.append("saved")
    assert order == []


def test_answered_outside_a_saving_block_holds_nothing(installed):
    interrupts.answered()  # a device's description or a model's count: nothing to save (the doctor's children)
    with pytest.raises(interrupts.Interrupted):
        os.kill(os.getpid(), signal.SIGHUP)
