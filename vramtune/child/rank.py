"""Which rank this worker is, of how many, when `paddle.distributed.launch` started it (one rank of one otherwise),
and keeping a rank from outliving its launcher. Paddle-free: the environment the launcher sets."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def rank() -> int:
    return int(os.environ.get("PADDLE_TRAINER_ID", "0"))


def world_size() -> int:
    return int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))


def device_ordinal(index: int) -> int:
    """The GPU this process measures on: under `paddle.distributed.launch`, the one the launcher selected for this rank
    (FLAGS_selected_gpus: what Paddle's ParallelEnv.device_id reads, so init_parallel_env's place is the same one);
    otherwise `index`. Paddle's counters are per process and device: a rank reading another GPU's reads ~0."""
    selected = os.environ.get("FLAGS_selected_gpus", "") if "PADDLE_TRAINER_ID" in os.environ else ""  # noqa: SIM112
    return int(selected.split(",")[0]) if selected else index


def die_with_launcher() -> None:
    """The launcher starts each rank in a session of its own; when the launcher dies (even by SIGKILL), Linux
    sends this rank SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
