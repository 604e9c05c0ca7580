"""A warm worker for CPU probes: it imports Paddle (and what a model source needs) once, then forks one fresh
process per probe, which runs the worker as `python -m vramtune.child.worker` would.

    python -m vramtune.child.forkserver        (started by runner.ForkServer; JSON lines on stdin and stdout)

What a fresh process guarantees still holds. Each probe is a process of its own, in a session of its own: a crash,
an OOM or a hang ends only that probe, and its process group is what a timeout ends (and what is ended once the
probe is answered). The server runs no Paddle code, it only imports, so a forked probe starts with the allocator
counters of a process that allocated nothing (the worker imports the same modules itself; the peaks are the same to
the byte). Nothing is forked where CUDA could have been initialised: the parent uses the server for CPU probes only.
The server dies with vramtune, and each probe with the server (PR_SET_PDEATHSIG).

Requests: {"arguments": [...], "env": {...}, "cwd": FOLDER, "stderr": PATH, "modules": [...]}. For each, the
server answers {"pid": N} once the probe runs and {"pid": N, "returncode": R} when it ended (-S: killed by signal S),
or R = 0 as soon as the probe says its result is on disk and its streams flushed (worker.ON_RESULT): the kernel's
teardown of the probe's memory then overlaps the parent's reading of the result, and the server reaps the probe
before it forks the next one, so no two probes ever run at once.
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from typing import Any


def _answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _probe(request: dict[str, Any], forked_at: float, set_by_imports: dict[str, str], announce: int) -> None:
    """In the forked child: become the worker process the request describes, run it, exit without teardown.

    Its environment is the request's plus what the server's imports set in it, as a fresh worker's would be after
    the same imports: Paddle sets OMP_NUM_THREADS=1 at import, and the OpenMP runtime, reset by the fork, reads it
    again at the probe's first kernel (without it MKL ran on every core, spinning, and a forked probe trained up to
    2x slower than a fresh one on a busy machine). It writes a byte to `announce` once its result is written."""
    os.setsid()  # the worker then dies with the server (PR_SET_PDEATHSIG, as with a launcher)
    gc.enable()  # the server's objects are frozen (serve): the probe's collections see only its own
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    code = 1
    try:
        output = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({**request["env"], **set_by_imports})  # grandchildren inherit the probe's marker
        paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:0] = paths  # as a fresh interpreter would have them
        from vramtune.child import worker

        worker.STARTED = forked_at
        worker.ON_RESULT = lambda: os.write(announce, b"1")
        worker.main(request["arguments"])  # exits itself once its result is written
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _outcome(pid: int, announced: int) -> tuple[int, bool]:
    """(return code, whether the probe is still to be reaped): 0 as soon as the probe announces its result, else its
    exit status once it ended without announcing one (a crash, a kill). Where there are no pidfds, its exit."""
    if hasattr(os, "pidfd_open"):
        exited = os.pidfd_open(pid)
        try:  # a grandchild may hold the announce pipe open: the probe's own exit is watched apart
            readable = select.select([announced, exited], [], [])[0]
            if announced in readable and os.read(announced, 1):
                return 0, True
        finally:
            os.close(exited)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), False


def serve() -> None:
    """Import, then fork a probe per request. The garbage collector stays off in the server: its imports create
    hundreds of thousands of objects and free next to none, and the collections they triggered took a quarter of
    PaddleNLP's import. Before each fork every object is frozen (gc.freeze), so a probe's collections never walk the
    server's objects (nor copy their pages)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    gc.disable()
    started_with = dict(os.environ)
    import paddle  # noqa: F401  the cost every probe would pay again

    from vramtune import sources  # noqa: F401  and what the worker imports when it runs
    from vramtune.child import building, counters, device, preparing, training, worker  # noqa: F401

    exiting = None  # the last probe, announced but not reaped yet
    for line in sys.stdin:
        request = json.loads(line)
        if exiting is not None:
            os.waitpid(exiting, 0)
            exiting = None
        for module in request.get("modules", []):
            importlib.import_module(module)
        if request.get("import_only"):  # a server made ready ahead of its first probe (ForkServer.preload)
            _answer({"imported": True})
            continue
        set_by_imports = {k: v for k, v in os.environ.items() if started_with.get(k) != v}
        gc.freeze()
        announced, announce = os.pipe()
        forked_at = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(announced)
            _probe(request, forked_at, set_by_imports, announce)
        os.close(announce)
        _answer({"pid": pid})
        returncode, still_exiting = _outcome(pid, announced)
        os.close(announced)
        exiting = pid if still_exiting else None
        _answer({"pid": pid, "returncode": returncode})
    os._exit(0)  # vramtune is done with it: skip the interpreter's teardown of Paddle (over a second with PaddleNLP)


if __name__ == "__main__":
    serve()
