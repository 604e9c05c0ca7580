"""The command line: each command's module (vramtune/commands/) parses, calls the session, renders and exits.
Exit codes: 0 ok, 1 nothing fits / check failed / the probe does not fit, 2 bad input, 3 internal error (traceback
saved to a file), 128 + the signal's number when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP). Under --json, a
failure prints {"error": ..., "exit_code": ...} on stdout (commands/common.py)."""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

import typer

from vramtune import __version__
from vramtune.commands import apply, autotuner_tool, check, doctor, estimate, measure, plot, probe, validate
from vramtune.commands.common import JsonUsageErrors
from vramtune.probing import interrupts
from vramtune.probing.forking import start_early
from vramtune.probing.runner import Backend, ChildBackend

COMMANDS = (probe, measure, apply, check, plot, validate, estimate, autotuner_tool, doctor)


def make_app(backend: Backend) -> typer.Typer:
    """The CLI over a measuring backend (real children, or fake devices in tests)."""
    app = typer.Typer(cls=JsonUsageErrors, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Find the fastest PaddlePaddle training configuration that fits your memory budget.")
    for command in COMMANDS:
        command.register(app, backend)

    def version_callback(value: bool) -> None:
        if value:
            print(f"vramtune {__version__}")
            raise typer.Exit()

    @app.callback()
    def root(version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                          help="print the version")) -> None:
        """vramtune: measured OOM auto-tuning for PaddlePaddle training."""

    return app


app = make_app(ChildBackend())


def main() -> None:
    """The console script: SIGTERM and SIGHUP end a run like Ctrl-C (the running probe is stopped, results are
    kept; vramtune/interrupts.py)."""
    interrupts.install()
    start_early(sys.argv[1:])  # the console script (`python -m vramtune` has started it before these imports)
    try:
        interrupts.run(app)
    except SystemExit as stop:
        exit_now(stop.code)


def exit_now(code: int | str | None) -> NoReturn:
    """Exit as Python would, without its teardown of every module and object (0.1-0.2 s once the report is out):
    the exit handlers run (the warm worker is ended), the streams are flushed, then the process ends."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`): nothing more can reach it
            stream.flush()
    os._exit(1 if isinstance(code, str) else code or 0)
