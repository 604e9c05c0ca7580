"""Parent side of the warm worker (child/forkserver.py): CPU probes are forked from a process that has imported
Paddle once, instead of each importing it again. The server is started on first use, restarted when it died or when
the environment Paddle reads at import changed, and closed when vramtune exits (it also dies with vramtune)."""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

PADDLE_ENV_PREFIXES = ("FLAGS_", "GLOG_", "OMP_", "MKL_", "CUDA_", "PADDLE_", "PYTHONWARNINGS")


class ForkServerError(Exception):
    """The server cannot take a probe (it died, or never started): run the probe as a fresh process instead."""


def _paddle_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(PADDLE_ENV_PREFIXES)}


class ForkServer:
    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.env: dict[str, str] = {}
        self.buffer = b""
        atexit.register(self.close)

    def _start(self, env: dict[str, str], arm: Any) -> subprocess.Popen:
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
        server_env = {k: v for k, v in env.items() if k != "VRAMTUNE_PROBE"}
        deadline = time.monotonic() + timeout
        try:
            server = self._start(server_env, arm)
            assert server.stdin is not None
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
        except BaseException:  # Ctrl-C / SIGTERM in the parent: end the probe, then pass it on
            end(pid)
            raise
        return ended["returncode"], False

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
