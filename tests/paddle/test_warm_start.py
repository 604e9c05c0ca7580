"""The warm worker's fixed cost: `python -m vramtune measure` starts the server before it imports the CLI (Paddle's
import overlaps the CLI's own imports and the spec's reading), only for commands that may probe, and vramtune's exit
ends the server at once instead of waiting for its teardown (or for an import still under way)."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import CONFIGS, ROOT

from vramtune import forking

pytestmark = pytest.mark.paddle

EARLY = textwrap.dedent("""
    import runpy, sys
    from vramtune import forking

    cli_started = {{}}

    def start(self, env, arm=None, original=forking.ForkServer.start):
        cli_started.setdefault("at_server_start", "vramtune.cli" in sys.modules)
        return original(self, env, arm)

    forking.ForkServer.start = start
    sys.argv = ["vramtune", *{arguments!r}]
    try:
        runpy.run_module("vramtune", run_name="__main__")
    except SystemExit as stop:
        print("exit", stop.code)
    print("cli imported when the server started:", cli_started.get("at_server_start"))
""")


def run_vramtune(arguments: list[str], tmp_path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", EARLY.format(arguments=arguments)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**forking.worker_env({}), "VRAMTUNE_CACHE": str(tmp_path / "c"),
                                                      "VRAMTUNE_LOCKS": str(tmp_path / "l")})
    return done.stdout.splitlines()


def test_a_probing_command_starts_the_warm_worker_before_the_cli_is_imported(tmp_path):
    lines = run_vramtune(["measure", str(CONFIGS / "mlp-python-cpu.yaml"), "--micro-batch", "256"], tmp_path)
    assert lines[-2:] == ["exit 0", "cli imported when the server started: False"], lines


def test_validate_starts_no_warm_worker(tmp_path):
    lines = run_vramtune(["validate", str(CONFIGS / "mlp-python-cpu.yaml")], tmp_path)
    assert lines[-2:] == ["exit 0", "cli imported when the server started: None"], lines


def test_closing_ends_a_server_still_importing_paddle_without_waiting_for_it():
    server = forking.ForkServer()
    process = server.start(forking.worker_env({}), forking.die_with_parent(signal.SIGKILL))
    server.close()  # at once: Paddle's import takes a second or more
    assert process.returncode == -signal.SIGKILL and server.process is None
