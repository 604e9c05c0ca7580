"""Models that fail on purpose, to provoke each fault for real. Only micro-batches m with lo < m <= hi
misbehave, so the one-sample build check and other probes run normally."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import numpy as np
import paddle
import paddle.nn as nn


class Faulty(nn.Layer):
    def __init__(self, mode: str, lo: int, hi: int, pid_file: str | None, rank: int | None, once: bool = False):
        super().__init__()
        self.mode, self.lo, self.hi, self.pid_file, self.rank, self.once = mode, lo, hi, pid_file, rank, once
        self.calls = 0
        self.blocks = nn.LayerList([nn.Linear(32, 32) for _ in range(2)])
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        bad = self.lo < x.shape[0] <= self.hi and self.rank in (None, int(os.environ.get("PADDLE_TRAINER_ID", "0")))
        if bad:
            self.misbehave()
        for block in self.blocks:
            x = paddle.nn.functional.relu(block(x))
        out = self.head(x)
        if self.mode == "nan" and bad:
            out = out * float("nan")
        if self.mode == "inf_first" and self.calls < self.lo:  # the first `lo` steps overflow under loss scaling
            out = out * 1e35
        self.calls += 1
        return out

    def misbehave(self) -> None:
        if self.mode == "oom":  # a real allocation far larger than the machine
            paddle.empty([1 << 42], dtype="float32")
        elif self.mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.mode == "segfault":
            ctypes.string_at(0)
        elif self.mode == "hang":  # with a grandchild, to prove the whole process group is ended
            if self.once and os.path.exists(self.pid_file):  # hung before (and was ended): run normally now
                return
            child = subprocess.Popen(["sleep", "600"])
            if self.pid_file:
                written(self.pid_file, f"{child.pid} {os.getpid()}")
            time.sleep(600)
        elif self.mode == "gate":  # waits until the test opens the gate (creates `pid_file` + ".open")
            written(self.pid_file, str(os.getpid()))
            while not os.path.exists(self.pid_file + ".open"):
                time.sleep(0.05)
        elif self.mode == "raise":
            raise RuntimeError("the model's forward failed")

        elif self.mode == "exit_oom":  # dies without a result, having said why on stderr (as a CUDA OOM abort does)
            sys.stderr.write("ResourceExhausted: Out of memory error on GPU 0. Cannot allocate 2.000000GB\n")
            sys.stderr.flush()
            os._exit(3)


def written(path: str, text: str) -> None:
    """`text` in `path` at once: a test waiting for the file to exist never reads it empty (it did under load)."""
    with open(path + ".part", "w") as handle:
        handle.write(text)
    os.replace(path + ".part", path)


def build(mode: str = "none", lo: int = 1, hi: int = 1 << 30, pid_file: str | None = None,
          rank: int | None = None, once: bool = False) -> nn.Layer:
    """rank: misbehave on that data-parallel rank only (all ranks when None). once: hang only while `pid_file` does
    not exist (the first time: a second run of the spec trains normally)."""
    if mode == "build_error":
        raise ValueError("width must be even")
    if mode == "build_oom":  # the weights alone do not fit
        paddle.empty([1 << 42], dtype="float32")
    if mode == "not_a_layer":
        return "a string"
    return Faulty(mode, lo, hi, pid_file, rank, once)


class Unconvertible(nn.Layer):
    """Trains in eager mode; paddle.jit.to_static(full_graph=True) cannot convert its forward (a NumPy detour)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 4)

    def forward(self, x):
        return self.linear(x) + paddle.to_tensor(np.asarray(x.numpy()).mean())


def unconvertible() -> nn.Layer:
    return Unconvertible()
