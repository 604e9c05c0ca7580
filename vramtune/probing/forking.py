"""Parent side of the warm worker (child/forkserver.py): CPU probes are forked from a process that has imported
Paddle once, instead of each importing it again. The server is started before the CLI's own imports when the
command may probe (`start_early`), or on first use; restarted when it died or when the environment Paddle reads at
import changed; and ended when vramtune exits (it also dies with vramtune). This module imports nothing of vramtune:
`python -m vramtune` starts the server before it imports the CLI."""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

PADDLE_ENV_PREFIXES = ("FLAGS_", "GLOG_", "OMP_", "MKL_", "CUDA_", "PADDLE_", "PYTHONWARNINGS")
PROBING_COMMANDS = ("probe", "measure", "check", "apply", "estimate", "doctor")  # the commands that may run probes
ROOT = str(Path(__file__).resolve().parent.parent)  # the folder vramtune is imported from, first on the worker's path
PR_SET_PDEATHSIG = 1


class ForkServerError(Exception):
    """The server cannot take a probe (it died, or never started): run the probe as a fresh process instead."""


def die_with_parent(signum: int) -> Callable[[], None]:
    """In the child before exec: Linux sends it `signum` when the parent dies, even by SIGKILL."""
    def arm() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    return arm


def worker_env(extra_env: dict[str, str]) -> dict[str, str]:
    """The environment of a worker process (and of the server it is forked from)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore", "GLOG_minloglevel": "2", **extra_env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def enabled() -> bool:
    """Whether CPU probes are forked from the warm server (VRAMTUNE_FORK=0 starts every probe from scratch)."""
    return os.environ.get("VRAMTUNE_FORK", "1") != "0"


def _paddle_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(PADDLE_ENV_PREFIXES)}


class ForkServer:
    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.env: dict[str, str] = {}
        self.buffer = b""
        self.preloading = False  # an import-only request sent, its answer not read yet
        atexit.register(self.close)

    def preload(self, env: dict[str, str], arm: Any, modules: tuple[str, ...]) -> None:
        """Start the server and have it import `modules` now, ahead of its first probe, without waiting: a second
        server (the estimate's) imports while the first one works."""
        try:
            server = self.start(env, arm)
            assert server.stdin is not None
            server.stdin.write((json.dumps({"modules": list(modules), "import_only": True}) + "\n").encode())
            self.preloading = True
        except (OSError, ValueError):
            self.close()

    def start(self, env: dict[str, str], arm: Any = None) -> subprocess.Popen:
        """The running server, started (with `env`) if there is none or it cannot serve `env`; it begins importing
        Paddle at once. It never carries a probe's marker (VRAMTUNE_PROBE): ending a probe must not end it."""
        env = {k: v for k, v in env.items() if k != "VRAMTUNE_PROBE"}
        if self.process is not None and (self.process.poll() is not None or _paddle_env(env) != _paddle_env(self.env)):
            self.close()
        if self.process is None:
            self.env, self.buffer = env, b""
            self.process = subprocess.Popen([sys.executable, "-m", "vramtune.child.forkserver"], env=env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                            bufsize=0, start_new_session=True, preexec_fn=arm)
        return self.process

    def _read(self, deadline: float | None) -> dict[str, Any] | None:
        """The server's next answer; None when the deadline passed first."""
        assert self.process is not None and self.process.stdout is not None
        while b"\n" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.process.stdout], [], [], wait)[0]:
                return None
            chunk = os.read(self.process.stdout.fileno(), 65536)
            if not chunk:
                raise ForkServerError("the fork server ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, request: dict[str, Any], env: dict[str, str], timeout: float, arm: Any,
            end: Any) -> tuple[int | None, bool]:
        """Fork one probe; returns (its return code, whether it timed out). `end(pid)` ends a probe's processes
        (on timeout, or when vramtune is interrupted, before the interrupt goes on)."""
        deadline = time.monotonic() + timeout
        try:
            server = self.start(env, arm)
            assert server.stdin is not None
            if self.preloading and self._read(deadline) is None:  # still importing what the probe needs
                self.close()
                return None, True
            self.preloading = False
            server.stdin.write((json.dumps(request) + "\n").encode())
            started = self._read(deadline)
        except (OSError, ValueError) as error:
            self.close()
            raise ForkServerError(str(error)) from error
        if started is None:  # the server is still importing what the probe needs: it is not the probe's fault
            self.close()
            return None, True
        pid = started["pid"]
        try:
            ended = self._read(deadline)
            if ended is None:
                end(pid)
                ended = self._read(time.monotonic() + 10)
                return (ended or {}).get("returncode"), True
        finally:  # on an interrupt too, before it goes on
            end(pid)  # the probe's session: what it forked carries no marker in /proc/PID/environ (a fork's is
            #           the server's, as exec'd), only its process group
        return ended["returncode"], False

    def close(self) -> None:
        """End the server now: it holds nothing to save, and no probe runs (run() ends its probe before it returns),
        so it is not asked to exit in order (a server with PaddleNLP loaded took 1.7 s to tear down, and one still
        importing Paddle would finish importing first)."""
        process, self.process, self.preloading = self.process, None, False
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        process.wait()


SHARED = ForkServer()  # one per vramtune process, whatever the number of backends


def start_early(arguments: list[str]) -> None:
    """Start the shared server when the command line names a command that may probe, so that Paddle's import in
    the server overlaps the CLI's own imports and the reading of the spec."""
    if arguments and arguments[0] in PROBING_COMMANDS and enabled():
        SHARED.start(worker_env({}), die_with_parent(signal.SIGKILL))
