"""Parent side of a probe: run the child worker in its own process group with a timeout, and turn whatever
happened into a classified result. The parent never imports Paddle or the model.

`ChildBackend` is the real backend; the tuning session accepts any object with the same two methods
(tests plug in fake devices)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from vramtune.core.gpu import CardUse, card_use
from vramtune.core.oom import NO_RETRY_ENV, looks_like_oom
from vramtune.core.records import STATUSES, Budget, Device, ProbeJob, ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.core.text import error_line
from vramtune.core.units import format_bytes
from vramtune.core.verification import ToolRun, Verified
from vramtune.plugins import SOURCES
from vramtune.probing import forking, interrupts
from vramtune.probing.forking import ForkServer, ForkServerError, die_with_parent, worker_env
from vramtune.probing.ranks import Launch, launcher, marked, merge, rank_logs, read_rank_results

INFO_TIMEOUT = 120.0


class DeviceError(Exception):
    """The requested device cannot be used (no GPU in this Paddle build, Paddle missing, ...)."""


class Backend(Protocol):
    def describe(self, device: str) -> Device: ...

    def measure(self, job: ProbeJob, timeout: float, budget: Budget) -> ProbeResult: ...

    def count(self, job: ProbeJob, timeout: float) -> dict[str, Any]: ...

    def verify(self, run: ToolRun, strategy: Strategy, device: Device, budget: Budget, timeout: float) -> Verified: ...


@dataclass
class ChildOutcome:
    returncode: int | None
    timed_out: bool
    stderr_tail: str
    seconds: float


def child_command(arguments: list[str], extra_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The worker's argv and environment (pure: no side effects, easy to test)."""
    return [sys.executable, "-m", "vramtune.child.worker", *arguments], worker_env(extra_env)


def gpu_memory_limit_env(device: Device, budget_bytes: int) -> dict[str, str]:
    """On a GPU, make the child's allocator fail at the budget so that real OOMs happen there, at once."""
    if device.kind != "gpu":
        return {}
    if budget_bytes >= device.total_bytes:
        return dict(NO_RETRY_ENV)
    return {"FLAGS_gpu_memory_limit_mb": str(max(1, budget_bytes // 2**20)), **NO_RETRY_ENV}


class ChildProcess:
    """One worker (or launcher) run in a new session, ended with everything it started on timeout or interrupt.

    Everything it starts inherits a unique environment marker, so even processes that moved to sessions of their
    own (the launcher's ranks) are found and ended. A launcher is asked first (SIGTERM: it ends its ranks), and
    dies with us; its ranks die with it (they arm PR_SET_PDEATHSIG themselves). A probe's worker `answers`: once it
    is over, a signal waits until the tuning has saved its result (interrupts.answered)."""

    GRACE = 5.0  # seconds a launcher gets to end its ranks

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: str, cwd: str | None = None,
                 graceful: bool = False, answers: bool = False):
        self.marker = uuid.uuid4().hex
        self.argv, self.stderr_path, self.cwd, self.graceful, self.answers = argv, stderr_path, cwd, graceful, answers
        self.env = {**env, "VRAMTUNE_PROBE": self.marker}
        self.process: subprocess.Popen | None = None

    def run(self, timeout: float) -> ChildOutcome:
        start = time.monotonic()
        death = signal.SIGTERM if self.graceful else signal.SIGKILL
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=stderr,
                                            stderr=stderr, start_new_session=True, cwd=self.cwd,
                                            preexec_fn=die_with_parent(death) if sys.platform == "linux" else None)
            timed_out = False
            try:
                self.process.wait(timeout=timeout)
                self.over()
            except subprocess.TimeoutExpired:
                timed_out = True
                self.kill()
                self.over()
            except BaseException:  # Ctrl-C / SIGTERM in the parent: end the probe, then pass it on
                self.kill()
                raise
            finally:
                self.sweep()  # grandchildren the model started must not outlive the probe
        return ChildOutcome(self.process.returncode, timed_out, _tail(self.stderr_path), time.monotonic() - start)

    def over(self) -> None:
        if self.answers:
            interrupts.answered()

    def kill(self) -> None:
        """End the child's group (a launcher gets a grace period to end its ranks), then reap the child."""
        if self.process is None or self.process.returncode is not None:
            return
        if self.graceful:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=self.GRACE)
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a loaded machine may be slow to deliver it:
            self.process.wait(timeout=self.GRACE)  # never block an interrupt on it (the sweep follows)

    def _signal_group(self, signum: int) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)

    def sweep(self) -> None:
        """SIGKILL whatever still carries this run's marker (only processes it started do)."""
        end_processes(self.process.pid if self.process is not None else None, self.marker)


def end_processes(group: int | None, marker: str) -> None:
    """SIGKILL a probe's process group and whatever carries its marker (only processes it started do)."""
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in marked(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class ForkedProbe:
    """One worker forked from the warm fork server (CPU probes): the same run() as a ChildProcess."""

    def __init__(self, server: ForkServer, arguments: list[str], env: dict[str, str], stderr_path: str, cwd: str,
                 modules: tuple[str, ...]):
        self.marker = uuid.uuid4().hex
        self.server, self.stderr_path = server, stderr_path
        self.env = {**env, "VRAMTUNE_PROBE": self.marker}
        self.request = {"arguments": arguments, "env": self.env, "cwd": cwd, "stderr": stderr_path,
                        "modules": list(modules)}

    def run(self, timeout: float) -> ChildOutcome:
        start = time.monotonic()
        try:
            returncode, timed_out = self.server.run(self.request, self.env, timeout, die_with_parent(signal.SIGKILL),
                                                    lambda pid: end_processes(pid, self.marker))
            interrupts.answered()  # over: a signal from here on waits until its result is saved
        finally:
            end_processes(None, self.marker)  # grandchildren the model started must not outlive the probe
        return ChildOutcome(returncode, timed_out, _tail(self.stderr_path), time.monotonic() - start)


def _tail(path: str, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def classify(outcome: ChildOutcome, payload: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    """What happened to a child, as a status and a short reason."""
    if outcome.timed_out:
        return {"status": "timeout", "error": f"no result after {timeout:g}s; the probe's process group was ended"}
    if payload is not None and payload.get("status") in (*STATUSES, "measured"):
        return payload
    if outcome.returncode is not None and outcome.returncode < 0:
        name = signal.Signals(-outcome.returncode).name
        if name == "SIGABRT" and looks_like_oom(outcome.stderr_tail):  # an uncaught BadAlloc (a non-Python thread)
            return {"status": "oom", "error": f"killed by SIGABRT: {error_line(outcome.stderr_tail, last=True)}"}
        hint = " (likely the system OOM killer)" if name == "SIGKILL" else ""
        return {"status": "crashed", "error": f"killed by {name}{hint}"}
    last_line = error_line(outcome.stderr_tail, last=True, default="no output")
    if looks_like_oom(outcome.stderr_tail):
        return {"status": "oom", "error": last_line}
    return {"status": "crashed", "error": f"exit code {outcome.returncode} without a result: {last_line}"}


Launcher = Callable[[list[str], dict[str, str]], "Launch | None"]  # (worker arguments, env) -> how to launch


def run_worker(arguments: list[str], extra_env: dict[str, str], timeout: float,
               job: dict[str, Any] | None = None, launcher: Launcher | None = None,
               fork: tuple[ForkServer, tuple[str, ...]] | None = None) -> tuple[ChildOutcome, dict[str, Any] | None]:
    """Run the worker once in a temporary folder (its working folder too: a launcher's logs go there), forked from
    the warm server when `fork` (the server, and the modules the probe imports) is given; returns the outcome and
    its JSON result (the ranks' merged into one), if any."""
    with tempfile.TemporaryDirectory(prefix="vramtune-") as folder:
        out = os.path.join(folder, "result.json")
        if job is not None:
            job_path = os.path.join(folder, "job.json")
            Path(job_path).write_text(json.dumps(job), encoding="utf-8")
            arguments = [*arguments, "--job", job_path]
        arguments = [*arguments, "--out", out]
        argv, env = child_command(arguments, extra_env)
        stderr = os.path.join(folder, "stderr.txt")
        launch = launcher(arguments, env) if launcher else None
        outcome = None
        if fork and not launch:
            with contextlib.suppress(ForkServerError):
                outcome = ForkedProbe(fork[0], arguments, env, stderr, folder, fork[1]).run(timeout)
        if outcome is None:
            if launch:
                argv, env = launch.argv, launch.env
            outcome = ChildProcess(argv, env, stderr, cwd=folder, graceful=bool(launch), answers=True).run(timeout)
        if launch:
            payload = merge(read_rank_results(out, launch.ranks), rank_logs(folder, launch.ranks))
        else:
            try:
                payload = json.loads(Path(out).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                payload = None
    return outcome, payload


class ChildBackend:
    """Real measurements: each probe in a fresh child process running Paddle (on CPU, forked from a warm server
    that has imported Paddle once; VRAMTUNE_FORK=0 starts every probe from scratch)."""

    def __init__(self) -> None:
        self.fork_server = forking.SHARED  # one per process, whatever the number of backends (started early)

    @property
    def forking(self) -> bool:
        return forking.enabled()

    def preload(self, source: str) -> None:
        """Have the CPU fork server import what the model source's probes import now, ahead of its first probe."""
        if self.forking:
            self.fork_server.preload(worker_env({}), die_with_parent(signal.SIGKILL), SOURCES[source].modules)

    def describe(self, device: str) -> Device:
        """Ask a child which device 'auto'/'cpu'/'gpu:N' is, its memory and AMP support ('cpu' is asked of the warm
        server: it never looks for a GPU)."""
        fork = (self.fork_server, ()) if device == "cpu" and self.forking else None
        outcome, payload = run_worker(["info", "--device", device], {}, INFO_TIMEOUT, fork=fork)
        if payload is None or "error" in payload:
            reason = (payload or {}).get("error") or classify(outcome, None, INFO_TIMEOUT)["error"]
            if "No module named 'paddle'" in reason:
                reason = "PaddlePaddle is not installed: pip install 'vramtune[cpu]' (or a GPU build, see README)"
            raise DeviceError(f"device {device!r}: {reason}")
        found = Device.from_json(payload)
        card = on_card(found, card_use())
        return dataclasses.replace(found, holders=card.pids) if card else found

    def measure(self, job: ProbeJob, timeout: float, budget: Budget) -> ProbeResult:
        """One probe; on a GPU the child's allocator is capped at the budget, so over-budget configs OOM there."""
        device, strategy = Device.from_json(job.device), Strategy.from_json(job.strategy)

        def ranks(arguments: list[str], env: dict[str, str]) -> Launch | None:
            return launcher(strategy, device, arguments, env)

        fork = (self.fork_server, SOURCES[job.source].modules) if device.kind == "cpu" and self.forking else None
        card = on_card(device, card_use()) if device.kind == "gpu" else None  # no probe runs: the lock is held
        outcome, payload = run_worker(["probe"], gpu_memory_limit_env(device, budget.bytes), timeout, job.to_json(),
                                      ranks, fork)
        return result_from(job, beside_others(classify(outcome, payload, timeout), card, budget.bytes),
                           outcome.seconds)

    def count(self, job: ProbeJob, timeout: float) -> dict[str, Any]:
        """The model's parameter counts (child/counting.py): built lazily, never allocated. Raises DeviceError when
        the child cannot say (a build error, Paddle missing)."""
        fork = (self.fork_server, SOURCES[job.source].modules) if self.forking else None
        outcome, payload = run_worker(["count"], {}, timeout, job.to_json(), fork=fork)
        if payload is None or "error" in payload:
            reason = (payload or {}).get("error") or classify(outcome, None, timeout)["error"]
            raise DeviceError(f"counting the model's parameters failed: {reason}")
        return payload


    def verify(self, run: ToolRun, strategy: Strategy, device: Device, budget: Budget, timeout: float) -> Verified:
        """The user's own tool on the tuned file, bounded: its peak from the counters the probes read."""
        outcome, figures = run_tool(run, device, budget, timeout)
        return verified(run, outcome, figures, budget, timeout)


def verified(run: ToolRun, outcome: ChildOutcome, figures: dict[str, Any], budget: Budget, timeout: float) -> Verified:
    """What a verification run measured, judged against the budget: its peak where it trained (reserved on a GPU),
    else why it did not (an out-of-memory error is over the budget)."""
    notes = [*run.notes, *(f"{name} stubbed (a no-op on a CPU, which has no queue to wait for)"
                           for name in figures.get("stubbed", []))]
    used = figures.get("reserved_bytes") or figures.get("peak_bytes")
    evaluation = figures.get("eval_reserved_bytes") or figures.get("eval_peak_bytes")
    phases = {"eval_batch": run.eval_batch, "eval_peak_bytes": evaluation if run.eval_batch else None,
              "eval_steps": figures.get("eval_steps") if run.eval_batch else None}
    if run.eval_batch and evaluation and figures.get("resets") is False:
        notes.append("Paddle cannot reset its peak counter here (2.6): the evaluation's peak is the run's up to its "
                     "end, the training's the run's before it")
    if outcome.returncode == 0 and used:
        if run.eval_batch and not evaluation:
            notes.append("the file evaluates, but no evaluation ran within the bounded run: training alone verified")
        whole = max(used, phases["eval_peak_bytes"] or 0)
        return Verified(run.tool, "fits" if budget.fits(whole) else "over_budget", used, seconds=outcome.seconds,
                        steps=figures.get("steps"), notes=notes, **phases)
    if outcome.timed_out:
        return Verified(run.tool, "failed", seconds=outcome.seconds, notes=notes,
                        error=f"timed out after {timeout:.0f}s")
    error = error_line(outcome.stderr_tail, last=True) or f"exited with code {outcome.returncode} and no error message"
    error = f"{error} (in its evaluation pass)" if figures.get("raised_in") == "evaluation" else error
    status = "over_budget" if looks_like_oom(outcome.stderr_tail) else "failed"
    return Verified(run.tool, status, used, seconds=outcome.seconds, notes=notes, error=error, **phases)


def on_card(device: Device, use: dict[str, CardUse] | None) -> CardUse | None:
    """What nvidia-smi says the device's card holds, where it says and the card's bus id is known."""
    if use is None or device.kind != "gpu" or device.index >= len(device.buses):
        return None
    return use.get(device.buses[device.index])


def beside_others(outcome: dict[str, Any], card: CardUse | None, budget_bytes: int) -> dict[str, Any]:
    """An out-of-memory on a card whose other processes left less than the budget free when the probe started
    (`card`: nvidia-smi then; the device lock held, so none of them is vramtune's) says so: the card ran out, not the
    budget."""
    if outcome.get("status") != "oom" or card is None or card.used_bytes + budget_bytes <= card.total_bytes:
        return outcome
    reserved = outcome.get("reserved_at_oom")
    got = f"with {format_bytes(reserved)} reserved of the {format_bytes(budget_bytes)} budget: " \
        if reserved is not None else ""
    pids = f" (pids {', '.join(map(str, card.pids))})" if card.pids else ""
    return {**outcome, "error": f"{outcome.get('error')}; {got}other processes held {format_bytes(card.used_bytes)} "
                                f"of the {format_bytes(card.total_bytes)} card when the probe started{pids}, so the "
                                "budget was not all free"}


def result_from(job: ProbeJob, outcome: dict[str, Any], seconds: float) -> ProbeResult:
    """A ProbeResult from what the child (or its classification) said."""
    device = job.device
    return ProbeResult.from_json({**outcome, **job.strategy, "device": {"name": device["name"], "kind": device["kind"]},
                                  "paddle_version": device["paddle_version"], "seconds": round(seconds, 3)})


VERIFY_HOOK = Path(__file__).resolve().parent / "verify_hook"  # sitecustomize.py: the verification child's counters


def verify_env(run: ToolRun, device: Device, budget: Budget, out: str) -> dict[str, str]:
    """The environment of a verification run: the hook first on PYTHONPATH (with the run's own paths), where it
    writes, and on a GPU the card the probes ran on, capped at the budget as a probe is (pure: easy to test)."""
    paths = [str(VERIFY_HOOK), run.env.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, **run.env, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "VRAMTUNE_VERIFY_OUT": out,
           "VRAMTUNE_VERIFY_DEVICE": "cpu" if device.kind == "cpu" else "gpu:0",
           **({"VRAMTUNE_VERIFY_EVALUATES": "1"} if run.eval_batch else {})}
    if device.kind == "gpu":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        cards = visible.split(",") if visible else [str(index) for index in range(device.count)]
        env["CUDA_VISIBLE_DEVICES"] = cards[device.index] if device.index < len(cards) else str(device.index)
        env.update(gpu_memory_limit_env(device, budget.bytes))
    return env


def run_tool(run: ToolRun, device: Device, budget: Budget, timeout: float) -> tuple[ChildOutcome, dict[str, Any]]:
    """The user's own tool, bounded by its command, in its own process group with a timeout; its output (stdout and
    stderr) kept in a temporary file whose tail says why it failed; the figures the hook wrote ({} if none)."""
    with tempfile.TemporaryDirectory(prefix="vramtune-verify-") as folder:
        out, log = os.path.join(folder, "peak.json"), os.path.join(folder, "output.txt")
        outcome = ChildProcess(run.argv, verify_env(run, device, budget, out), log, cwd=run.cwd).run(timeout)
        try:
            figures = json.loads(Path(out).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            figures = {}
    return outcome, figures
