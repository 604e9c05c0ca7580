"""The warm worker's fixed cost: `python -m vramtune measure` starts the server before it imports the CLI (Paddle's
import overlaps the CLI's own imports and the spec's reading), only for commands that may probe, and vramtune's exit
ends the server at once instead of waiting for its teardown (or for an import still under way); vramtune itself exits
without the interpreter's teardown, its exit handlers run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import CONFIGS, HUNG, ROOT

from vramtune.probing import forking

pytestmark = pytest.mark.paddle

EARLY = textwrap.dedent("""
    import atexit, runpy, sys
    from vramtune.probing import forking

    cli_started = {{}}

    def start(self, env, arm=None, original=forking.ForkServer.start):
        cli_started.setdefault("at_server_start", "vramtune.cli" in sys.modules)
        process = original(self, env, arm)
        print("server", process.pid)
        return process

    forking.ForkServer.start = start
    atexit.register(lambda: print("cli imported when the server started:", cli_started.get("at_server_start")))
    sys.argv = ["vramtune", *{arguments!r}]
    runpy.run_module("vramtune", run_name="__main__")
""")


def run_vramtune(arguments: list[str], tmp_path) -> tuple[int, list[str]]:
    """`python -m vramtune ARGUMENTS`: its exit code and stdout, where an exit handler says whether the CLI was
    imported when the warm worker started (None: no worker started)."""
    done = subprocess.run([sys.executable, "-c", EARLY.format(arguments=arguments)], capture_output=True, text=True,
                          timeout=HUNG, cwd=ROOT, env={**forking.worker_env({}), "VRAMTUNE_CACHE": str(tmp_path / "c"),
                                                      "VRAMTUNE_LOCKS": str(tmp_path / "l")})
    return done.returncode, done.stdout.splitlines()


def test_a_probing_command_starts_the_warm_worker_before_the_cli_is_imported(tmp_path):
    code, lines = run_vramtune(["measure", str(CONFIGS / "mlp-python-cpu.yaml"), "--micro-batch", "256"], tmp_path)
    assert (code, lines[-1]) == (0, "cli imported when the server started: False"), lines


def test_vramtune_exits_without_the_teardown_yet_runs_its_exit_handlers_and_leaves_no_worker(tmp_path):
    """The exit code is the command's, stdout is whole (the JSON report, then what an exit handler printed), and the
    warm worker was ended and reaped before vramtune returned: its pid is gone from /proc."""
    code, lines = run_vramtune(["measure", str(CONFIGS / "mlp-python-cpu.yaml"), "--micro-batch", "256", "--json"],
                               tmp_path)
    server = next(int(line.split()[1]) for line in lines if line.startswith("server "))
    assert code == 0 and lines[-2:] == ["}", "cli imported when the server started: False"], lines
    assert not os.path.exists(f"/proc/{server}")


def test_validate_starts_no_warm_worker(tmp_path):
    code, lines = run_vramtune(["validate", str(CONFIGS / "mlp-python-cpu.yaml")], tmp_path)
    assert (code, lines[-1]) == (0, "cli imported when the server started: None"), lines


def test_bad_input_exits_2_through_the_short_exit(tmp_path):
    code, lines = run_vramtune(["measure", str(tmp_path / "missing.yaml")], tmp_path)
    assert (code, lines[-1]) == (2, "cli imported when the server started: False"), lines


def test_closing_ends_a_server_still_importing_paddle_without_waiting_for_it():
    server = forking.ForkServer()
    process = server.start(forking.worker_env({}), forking.die_with_parent(signal.SIGKILL))
    server.close()  # at once: Paddle's import takes a second or more
    assert process.returncode == -signal.SIGKILL and server.process is None
