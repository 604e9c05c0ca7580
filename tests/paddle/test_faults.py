"""Every fault is provoked for real (real Paddle on CPU, real signals, real files) and must become a
classified, reported outcome: tuning goes on, saved results survive."""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FAULTS, HUNG, fault_spec, hangup_default

pytestmark = pytest.mark.paddle


def run_json(cli, *args):
    code, out, err = cli(*args, "--json")
    return code, json.loads(out) if out else None, err


def saved_lines(cache: Path) -> list[dict]:
    return [json.loads(line)["result"] for path in cache.glob("*/probes.jsonl") for line in path.read_text().splitlines()]


def wait_until(condition, seconds: float = HUNG) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state


def test_real_oom_is_classified_and_tuning_continues(cli, write_spec, private_cache):
    code, report, err = run_json(cli, "probe", write_spec(fault_spec("oom", lo=8)))
    assert code == 0, err
    ooms = [p for p in report["probes"] if p["status"] == "oom"]
    assert ooms and "(ResourceExhausted)" in ooms[0]["error"]
    assert report["chosen"]["micro_batch"] <= 8
    assert {p["status"] for p in saved_lines(private_cache)} >= {"oom", "fits"}


@pytest.mark.parametrize("mode, signal_name", [("sigkill", "SIGKILL"), ("segfault", "SIGSEGV")])
def test_killed_probe_is_crashed_with_the_signal_named(cli, write_spec, mode, signal_name):
    code, report, err = run_json(cli, "probe", write_spec(fault_spec(mode, lo=8)))
    assert code == 0, err
    crashed = [p for p in report["probes"] if p["status"] == "crashed"]
    assert crashed and crashed[0]["error"].startswith(f"killed by {signal_name}")
    assert report["chosen"]["micro_batch"] <= 8


def test_hanging_probe_times_out_and_its_whole_group_is_ended(cli, write_spec, tmp_path, timeout_from):
    pid_file = tmp_path / "grandchild.pid"
    spec = fault_spec("hang", lo=8, timeout=3)
    spec["model"]["kwargs"]["pid_file"] = str(pid_file)
    timeout_from(pid_file)  # its 3 s count from the hang, however long the start took
    code, result, err = run_json(cli, "measure", write_spec(spec), "--micro-batch", 64)
    assert code == 1, err  # measure: 0 only when the probe fits
    assert result["status"] == "timeout"
    assert result["error"] == "no result after 3s; the probe's process group was ended"
    assert time.time() - pid_file.stat().st_mtime < 600  # ended by the timeout, not by the end of its 600 s sleep
    grandchild = int(pid_file.read_text().split()[0])
    assert wait_until(lambda: process_gone(grandchild))


def test_non_finite_loss_is_unstable_and_never_chosen(cli, write_spec):
    code, report, _ = run_json(cli, "probe", write_spec(fault_spec("nan", lo=8)))
    assert code == 0
    assert report["probes"][0]["status"] == "unstable"
    assert report["probes"][0]["error"].startswith("non-finite loss")
    assert report["chosen"]["micro_batch"] <= 8


def test_factory_import_error_stops_at_once_with_exit_2(cli, write_spec):
    spec = fault_spec("none")
    spec["model"]["factory"] = "import_error_model:build"
    path = write_spec(spec)
    code, out, err = cli("probe", path)
    assert (code, out) == (2, "")
    assert "[ 2]" not in err  # one probe, not a ladder of identical failures
    assert err.splitlines()[-1] == (
        f"error: {path}: model.factory: 'import_error_model:build': importing 'import_error_model' failed: "
        f"ImportError: No module named 'flash_attn' ({FAULTS / 'import_error_model.py'}:2)")


def test_factory_build_error_exit_2(cli, write_spec, private_cache):
    path = write_spec(fault_spec("build_error"))
    code, _, err = cli("probe", path)
    assert code == 2
    assert err.splitlines()[-1] == f"error: {path}: model.factory: 'fault_models:build' raised ValueError: width must be even"
    assert saved_lines(private_cache) == []  # a build error is not cached: fixing the code must be seen


def _start_probe(spec_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vramtune", "probe", str(spec_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
                            preexec_fn=hangup_default)


def _wait_for_line(process: subprocess.Popen, marker: str, timeout: float = HUNG) -> list[str]:
    """stderr lines up to the first one holding `marker`; fails after `timeout` seconds without it. A reader
    thread feeds a queue, so the wait is bounded even when the process prints nothing."""
    _read_stderr(process)
    lines, deadline = [], time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            line = process.lines.get(timeout=remaining)
        except queue.Empty:
            break
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} within {timeout}s in {lines}")


def _read_stderr(process: subprocess.Popen) -> None:
    """Start (once) a thread that moves the process's stderr lines into a queue and a list."""
    if hasattr(process, "lines"):
        return
    process.lines, process.seen = queue.Queue(), []

    def pump() -> None:
        for line in process.stderr:
            process.seen.append(line)
            process.lines.put(line)
    process.reader = threading.Thread(target=pump, daemon=True)
    process.reader.start()


def _finish(process: subprocess.Popen, timeout: float = HUNG) -> tuple[str, str]:
    """Wait for the process; its stdout and its whole stderr."""
    _read_stderr(process)
    process.wait(timeout=timeout)
    out = process.stdout.read()
    process.reader.join(timeout=10)
    return out, "".join(process.seen)


def lock_holder(cache: Path) -> str:
    return "".join(path.read_text() for path in cache.glob("*/lock"))


def test_corrupted_results_are_set_aside_and_good_ones_kept(cli, write_spec, private_cache):
    path = write_spec(fault_spec("none"))
    code, first, _ = run_json(cli, "probe", path)
    assert code == 0
    (results,) = list(private_cache.glob("*/probes.jsonl"))
    good = results.read_text()
    results.write_text(good + '{"format": 2, "vramtune": "0.2.0", "result": {"status": "fi')  # a torn write
    code, second, err = run_json(cli, "probe", path)
    assert code == 0 and second["reused"] == len(first["probes"])
    assert "had 1 damaged or foreign line(s); moved to probes.jsonl.bad-" in err
    assert results.read_text() == good
    assert len(list(results.parent.glob("probes.jsonl.bad-*"))) == 1


def test_results_from_another_version_are_set_aside(cli, write_spec, private_cache):
    path = write_spec(fault_spec("none"))
    run_json(cli, "probe", path)
    (results,) = list(private_cache.glob("*/probes.jsonl"))
    from vramtune import __version__
    results.write_text(results.read_text().replace(f'"vramtune": "{__version__}"', '"vramtune": "0.1.0"'))
    code, report, err = run_json(cli, "probe", path)
    assert code == 0 and report["reused"] == 0
    assert "damaged or foreign line(s)" in err


def test_second_run_waits_for_the_lock_and_reuses_results(write_spec, private_cache, tmp_path):
    gate = tmp_path / "gate"
    spec = fault_spec("gate", lo=32, timeout=HUNG, search={"micro_batches": [64, 16]})
    spec["model"]["kwargs"]["pid_file"] = str(gate)  # the first run's first probe waits there until it is opened
    path = write_spec(spec)
    first = _start_probe(path)
    assert wait_until(gate.exists) and lock_holder(private_cache) == str(first.pid)  # probing: it holds the lock
    second = _start_probe(path)
    _wait_for_line(second, "waiting")
    Path(f"{gate}.open").touch()
    out1, _ = _finish(first)
    out2, err2 = _finish(second)
    assert first.returncode == 0 and second.returncode == 0
    assert f"another vramtune run (pid {first.pid}) is tuning this spec (its results will be reused); waiting" in err2
    assert json.loads(out2)["reused"] == len(json.loads(out1)["probes"])
    lines = saved_lines(private_cache)
    assert len(lines) == len(json.loads(out1)["probes"])  # no interleaved or duplicate writes


def test_unwritable_cache_folder_is_a_clear_error(cli, write_spec, monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("VRAMTUNE_CACHE", str(blocker / "cache"))
    code, _, err = cli("probe", write_spec(fault_spec("none")))
    assert code == 2
    assert re.fullmatch(rf"error: cannot create the results folder {re.escape(str(blocker / 'cache'))}/"
                        r"[0-9a-f]{16}: Not a directory", err.splitlines()[-1])


def test_apply_to_an_unwritable_path_is_a_clear_error(cli, write_spec):
    """Said before any probe (it was said after tuning: 'cannot write /dev/full/tuned.yaml: Not a directory')."""
    code, _, err = cli("apply", write_spec(fault_spec("none")), "-o", "/dev/full/tuned.yaml")
    assert (code, err) == (2, "error: cannot write /dev/full/tuned.yaml: /dev/full is not a folder\n")


def test_lock_file_holder_is_named(write_spec, private_cache):
    """The waiting message names the pid that holds the lock (held here by this test process); the waiting run
    measures nothing until the lock is released, then takes the lock itself."""
    from vramtune.probing.runner import ChildBackend
    from vramtune.spec import load_spec
    from vramtune.tuning.session import open_session
    path = write_spec(fault_spec("none"))
    store = open_session(load_spec(path), ChildBackend(), print).store
    with store.locked(on_wait=print):
        process = _start_probe(path)
        lines = _wait_for_line(process, "waiting")
        assert f"another vramtune run (pid {os.getpid()}) is tuning this spec" in lines[-1]
        time.sleep(3)  # a probe takes about 3 s here: a run that did not wait would have saved one by now
        assert process.poll() is None and saved_lines(private_cache) == []
    assert wait_until(lambda: lock_holder(private_cache) == str(process.pid))
    _finish(process)
    assert process.returncode == 0 and saved_lines(private_cache)


def two_rank_fault(mode: str, timeout: float = HUNG, **kwargs) -> dict:
    spec = fault_spec(mode, lo=8, timeout=timeout, devices=2, search={"micro_batches": [16, 4]})
    spec["model"]["kwargs"].update(rank=1, **kwargs)
    return spec


def test_a_hanging_rank_times_out_the_probe_and_no_process_survives(cli, write_spec, tmp_path, timeout_from):
    pid_file = tmp_path / "rank1.pid"
    timeout_from(pid_file)  # its 5 s count from rank 1's hang, however long the ranks took to start
    code, result, err = run_json(cli, "measure", write_spec(two_rank_fault("hang", timeout=5, pid_file=str(pid_file))),
                                 "--micro-batch", 16)
    assert (code, result["status"]) == (1, "timeout"), err
    assert time.time() - pid_file.stat().st_mtime < 600  # ended by the timeout, not by the end of its 600 s sleep
    grandchild, rank = map(int, pid_file.read_text().split())
    assert wait_until(lambda: process_gone(grandchild) and process_gone(rank))


def test_a_killed_rank_is_classified_and_the_other_rank_ends(cli, write_spec):
    code, result, err = run_json(cli, "measure", write_spec(two_rank_fault("sigkill")), "--micro-batch", 16)
    assert code == 1 and result["status"] == "crashed", err
    assert result["error"] == "rank 1 was killed (no error in its log; the system OOM killer?)"


def test_interrupting_a_two_rank_probe_leaves_nothing_running(write_spec, tmp_path, private_cache):
    pid_file = tmp_path / "rank1.pid"
    path = write_spec(two_rank_fault("hang", timeout=HUNG, pid_file=str(pid_file)))
    process = _start_probe(path)
    assert wait_until(pid_file.exists)  # rank 1's model is hanging
    grandchild, rank = map(int, pid_file.read_text().split())
    process.send_signal(signal.SIGINT)
    _finish(process)
    assert process.returncode == 130
    assert wait_until(lambda: process_gone(grandchild) and process_gone(rank))


def test_a_killed_parent_takes_its_ranks_with_it(write_spec, tmp_path):
    pid_file = tmp_path / "rank1.pid"
    path = write_spec(two_rank_fault("hang", timeout=HUNG, pid_file=str(pid_file)))
    process = _start_probe(path)
    assert wait_until(pid_file.exists)
    grandchild, rank = map(int, pid_file.read_text().split())
    process.kill()  # SIGKILL: no handler runs in the parent
    process.wait()
    assert wait_until(lambda: process_gone(rank)), "rank 1 outlived the killed parent"
    os.kill(grandchild, signal.SIGKILL)  # the model's own sleep: only a living parent can sweep it (README)


def _hanging_measure(write_spec, tmp_path) -> tuple[subprocess.Popen, int, int]:
    """`vramtune measure` on a model that hangs (and starts a grandchild): (process, grandchild, worker pid)."""
    pid_file = tmp_path / "hang.pid"
    spec = fault_spec("hang", lo=8, timeout=HUNG)
    spec["model"]["kwargs"]["pid_file"] = str(pid_file)
    process = subprocess.Popen([sys.executable, "-m", "vramtune", "measure", str(write_spec(spec)), "--micro-batch",
                                "64", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=os.environ.copy())
    assert wait_until(pid_file.exists)
    grandchild, worker = map(int, pid_file.read_text().split())
    return process, grandchild, worker


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_measure_ends_its_probe_on_a_signal(write_spec, tmp_path, sig):
    process, grandchild, worker = _hanging_measure(write_spec, tmp_path)
    process.send_signal(sig)
    _finish(process)
    assert process.returncode == 128 + sig  # 143, 130
    assert wait_until(lambda: process_gone(worker) and process_gone(grandchild))


def test_a_probe_never_outlives_a_killed_parent(write_spec, tmp_path):
    process, grandchild, worker = _hanging_measure(write_spec, tmp_path)
    server = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])  # the worker's parent
    assert server != process.pid  # forked from the warm server, not started by vramtune itself
    process.kill()
    process.wait()
    assert wait_until(lambda: process_gone(worker) and process_gone(server)), \
        "the worker or its fork server outlived the killed parent"
    os.kill(grandchild, signal.SIGKILL)  # the model's own sleep: only a living parent can sweep it (README)


@pytest.mark.parametrize("mode, status, error", [
    ("raise", "crashed", "RuntimeError: the model's forward failed"),
    ("exit_oom", "oom", "ResourceExhausted: Out of memory error on GPU 0. Cannot allocate 2.000000GB"),
])
def test_a_failing_or_silently_dying_probe_is_classified(cli, write_spec, mode, status, error):
    code, result, err = run_json(cli, "measure", write_spec(fault_spec(mode, lo=8)), "--micro-batch", 64)
    assert (code, result["status"]) == (1, status), err
    assert error in result["error"]


def test_a_timeout_ends_only_the_probes_processes(cli, write_spec, tmp_path):
    bystander = subprocess.Popen(["sleep", str(HUNG)])  # ours, but not the probe's: it must survive
    try:
        spec = fault_spec("hang", lo=8, timeout=6)
        code, result, _ = run_json(cli, "measure", write_spec(spec), "--micro-batch", 64)
        assert (code, result["status"]) == (1, "timeout") and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("mode, lo", [("build_oom", 1), ("oom", 0)])  # in the build; in the one-sample check
def test_running_out_of_memory_before_training_is_a_memory_result_not_bad_input(cli, write_spec, mode, lo):
    path = write_spec(fault_spec(mode, lo=lo))
    code, result, err = run_json(cli, "measure", path, "--micro-batch", 64)
    assert (code, result["status"]) == (1, "oom"), err
    assert "ResourceExhausted" in result["error"]
    code, report, err = run_json(cli, "probe", path)
    assert code == 1 and report["chosen"] is None and "nothing fits" in err


def test_warmup_waits_for_the_optimizer_state_when_the_scaler_skips_steps(tmp_path, monkeypatch):
    """fp16's GradScaler skips optimizer.step() while it finds inf gradients: the measured peak must include
    AdamW's moments, so warmup goes on until they exist (the scaler itself runs on CPU too)."""
    from vramtune.child.worker import run_probe
    from vramtune.core.records import Budget
    from vramtune.core.strategy import Strategy
    from vramtune.probing.runner import ChildBackend
    from vramtune.spec import spec_from_dict
    from vramtune.tuning.session import job_for

    monkeypatch.syspath_prepend(str(FAULTS))
    spec = spec_from_dict(fault_spec("inf_first", lo=3), str(tmp_path / "spec.yaml"))
    device = ChildBackend().describe("cpu")
    job = job_for(spec, Strategy(precision="fp16", micro_batch=8, accumulation=1), device,
                  Budget(device.total_bytes, 0.05)).to_json()
    result = run_probe(job)
    assert result["optimizer_state"] is True and result["status"] == "measured", result
    assert result["optimizer_bytes"] > 0


def test_a_model_to_static_cannot_convert_is_unsupported_with_the_reason(cli, write_spec):
    """The conversion fails at the compiled model's first call (Tensor.numpy() in its forward): `unsupported`, its
    reason said, where eager measures the same model."""
    spec = fault_spec("none")
    spec["model"] = {"source": "python", "factory": "fault_models:unconvertible"}
    spec = write_spec(spec)
    code, out, err = cli("measure", spec, "-m", 8, "--to-static", "--json")
    result = json.loads(out)
    assert code == 0 and result["status"] == "unsupported", err
    assert result["error"].startswith("to_static: the model cannot be converted: ")
    code, out, _ = cli("measure", spec, "-m", 8, "--json")
    assert code == 0 and json.loads(out)["status"] == "fits"
