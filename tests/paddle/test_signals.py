"""A signal ends a `vramtune probe` run the shell's way and loses nothing (vramtune/interrupts.py): Ctrl-C (SIGINT),
`kill` (SIGTERM) and a closed terminal (SIGHUP) stop the running probe and every process it started, keep every
finished probe, say what the run had, and exit 128 + the signal's number; a re-run reuses the finished probes and
measures only the rest. A probe child killed by hand is a crashed probe, and tuning goes on.

Every wait is on an event (a saved line, a pid file the hanging probe writes, the process's exit), bounded
generously for a loaded machine, and a signal meant for the instant a probe's result has been read is sent by
vramtune to itself, from a hook at that point; no outcome depends on timing: every probe is over a 1 KiB budget,
so the ladder takes the same steps on any machine."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest
from conftest import HUNG, ROOT, fault_spec, hangup_default
from test_faults import _finish, _start_probe, _wait_for_line, process_gone, saved_lines, wait_until

pytestmark = pytest.mark.paddle

STARTED = HUNG  # seconds allowed for a run to reach its hanging probe (the probe's timeout too), however loaded
ENDED = HUNG  # seconds allowed for an interrupted run to end its probe and print its summary


def hang_once_spec(pid_file: Path, lo: int = 8, hi: int = 32) -> dict:
    """Micro-batch 64, then 16, over a 1 KiB budget; the first probe at a micro-batch in (lo, hi] hangs (writing its
    grandchild's and its worker's pids to `pid_file`) until it is ended; once the file exists, the model trains
    normally."""
    spec = fault_spec("hang", lo=lo, hi=hi, timeout=STARTED, budget=1024, search={"micro_batches": [64, 16]})
    spec["model"]["kwargs"].update(pid_file=str(pid_file), once=True)
    return spec


def hanging(cache: Path, pid_file: Path) -> tuple[int, int, int]:
    """Wait until the first probe is saved and the second is hanging; the pids of its grandchild, its worker and the
    worker's parent (the fork server vramtune started)."""
    assert wait_until(lambda: len(saved_lines(cache)) == 1 and pid_file.exists() and pid_file.read_text(), STARTED)
    grandchild, worker = map(int, pid_file.read_text().split())
    server = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return grandchild, worker, server


def rerun_reuses(path: Path, cache: Path, first: list[dict]) -> None:
    """A re-run reuses the interrupted run's probes (said "(saved)") and measures only the others: each strategy
    is saved once over both runs."""
    again = _start_probe(path)
    lines = _wait_for_line(again, "[ 1]", STARTED)
    assert lines[-1].rstrip().endswith("(saved)")
    out, err = _finish(again, STARTED)
    report = json.loads(out)
    assert again.returncode == 1, err  # nothing fits 1 KiB
    assert report["reused"] == len(first) and not report["interrupted"]
    assert 0 < len(report["probes"]) - report["reused"] < len(report["probes"])  # measured fewer than it has
    saved = saved_lines(cache)
    assert saved[:len(first)] == first and len(saved) == len(report["probes"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_keeps_the_finished_probes_and_a_rerun_reuses_them(write_spec, tmp_path, private_cache, sig):
    pid_file = tmp_path / "hang.pid"
    path = write_spec(hang_once_spec(pid_file))
    process = _start_probe(path)
    grandchild, worker, server = hanging(private_cache, pid_file)
    assert server != process.pid  # forked from the warm server
    process.send_signal(sig)
    out, err = _finish(process, ENDED)
    assert process.returncode == 128 + sig, err
    report = json.loads(out)
    assert report["interrupted"] and len(report["probes"]) == 1
    summary = err.splitlines()[-2:]
    assert summary[0] == "interrupted after 1 probe(s): finished probes are saved; run again to resume"
    assert re.fullmatch(rf"1 probe in \d+\.\ds on {re.escape(report['device']['name'])}", summary[1])
    assert wait_until(lambda: all(map(process_gone, (worker, grandchild, server))))  # nothing of it left
    first = saved_lines(private_cache)
    assert [p["micro_batch"] for p in first] == [64] and first[0]["status"] == "over_budget"
    rerun_reuses(path, private_cache, first)


SIGNALLED_AFTER_READING = textwrap.dedent("""
    import os, runpy, sys
    from vramtune.probing import runner

    def result_from(job, outcome, seconds, original=runner.result_from):
        runner.result_from = original  # once: the first probe's result is read, not yet saved
        result = original(job, outcome, seconds)
        os.kill(os.getpid(), int(os.environ["SIGNAL_AFTER_READING"]))
        return result

    runner.result_from = result_from
    sys.argv = ["vramtune", *sys.argv[1:]]
    runpy.run_module("vramtune", run_name="__main__")
""")


@pytest.mark.parametrize("sig, fork", [(signal.SIGTERM, "1"), (signal.SIGINT, "1"), (signal.SIGHUP, "1"),
                                       (signal.SIGTERM, "0")], ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGTERM-unforked"])
def test_a_signal_once_a_probes_result_is_in_saves_the_probe_first(write_spec, private_cache, sig, fork):
    """The signal arrives as vramtune has read the first probe's result (from the warm server's fork, or a fresh
    process with VRAMTUNE_FORK=0), before it saved it: the probe is saved and in the partial report, then the run
    exits 128 + the signal; a re-run reuses it."""
    path = write_spec(fault_spec("none", budget=1024, search={"micro_batches": [64, 16]}))
    process = subprocess.Popen([sys.executable, "-c", SIGNALLED_AFTER_READING, "probe", str(path), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env={**os.environ, "SIGNAL_AFTER_READING": str(int(sig)), "VRAMTUNE_FORK": fork},
                               preexec_fn=hangup_default)
    out, err = _finish(process, STARTED)
    assert process.returncode == 128 + sig, err
    report = json.loads(out)
    assert report["interrupted"] and [p["micro_batch"] for p in report["probes"]] == [64]
    assert report["probes"][0]["status"] == "over_budget"
    rows = [line for line in err.splitlines() if line.startswith("│ ")]  # the probes table: the saved probe
    assert len(rows) == 1 and rows[0].startswith("│ 1 │") and "│ fp32 m=64 k=1 r=0 │ over_budget │" in rows[0], err
    summary = err.splitlines()[-2:]
    assert summary[0] == "interrupted after 1 probe(s): finished probes are saved; run again to resume"
    assert re.fullmatch(rf"1 probe in \d+\.\ds on {re.escape(report['device']['name'])}", summary[1])
    first = saved_lines(private_cache)
    assert [(p["micro_batch"], p["status"]) for p in first] == [(64, "over_budget")]
    rerun_reuses(path, private_cache, first)


def test_a_closed_terminal_ends_the_run_and_keeps_its_probes(write_spec, tmp_path, private_cache):
    """The terminal vramtune runs in goes away: the kernel sends SIGHUP, and every later write to the terminal
    fails. The run ends with 129 (no internal error, no traceback file), its probes kept."""
    pid_file, crashes = tmp_path / "hang.pid", tmp_path / "tmp"
    crashes.mkdir()
    path = write_spec(hang_once_spec(pid_file))
    controller, terminal = pty.openpty()

    def own_terminal() -> None:  # in the child: the new session's controlling terminal is the pty, its hangup heard
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        hangup_default()

    process = subprocess.Popen([sys.executable, "-m", "vramtune", "probe", str(path)], stdin=terminal,
                               stdout=terminal, stderr=terminal, start_new_session=True, preexec_fn=own_terminal,
                               env={**os.environ, "TERM": "xterm", "TMPDIR": str(crashes)})
    os.close(terminal)
    deadline = time.monotonic() + STARTED
    try:
        while not (saved_lines(private_cache) and pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the run never reached its hanging probe"
            if select.select([controller], [], [], 0.1)[0]:
                os.read(controller, 65536)  # the terminal is read while it lives (a full one would block the run)
        grandchild, worker = map(int, pid_file.read_text().split())
    finally:
        os.close(controller)  # the terminal is gone
    assert process.wait(timeout=ENDED) == 128 + signal.SIGHUP
    assert wait_until(lambda: process_gone(worker) and process_gone(grandchild))
    assert list(crashes.iterdir()) == []  # no "internal error" traceback
    first = saved_lines(private_cache)
    assert [p["micro_batch"] for p in first] == [64]
    rerun_reuses(path, private_cache, first)


def test_a_probe_child_killed_by_hand_is_crashed_and_tuning_goes_on(write_spec, tmp_path, private_cache):
    pid_file = tmp_path / "hang.pid"
    path = write_spec(hang_once_spec(pid_file, lo=32, hi=64))  # the first probe (micro-batch 64) hangs
    process = _start_probe(path)
    assert wait_until(lambda: pid_file.exists() and pid_file.read_text(), STARTED)
    grandchild, worker = map(int, pid_file.read_text().split())
    os.kill(worker, signal.SIGKILL)
    out, err = _finish(process, STARTED)
    assert process.returncode == 1, err  # tuned to the end: nothing fits 1 KiB
    report = json.loads(out)
    assert not report["interrupted"]
    killed, after = report["probes"]
    assert (killed["micro_batch"], killed["status"]) == (64, "crashed")
    assert killed["error"] == "killed by SIGKILL (likely the system OOM killer)"
    assert (after["micro_batch"], after["status"]) == (16, "over_budget")  # tuning went on
    assert wait_until(lambda: process_gone(grandchild))  # the probe's own processes were ended with it
    assert [p["status"] for p in saved_lines(private_cache)] == ["crashed", "over_budget"]
