"""How a run ends on a signal: Ctrl-C (SIGINT), `kill` or a scheduler's stop (SIGTERM) and a closed terminal
(SIGHUP) each raise `Interrupted` in the main thread, as Ctrl-C raises KeyboardInterrupt. The running probe's
processes are ended on the way out (runner.py, forking.py), the finished probes are already saved (store.py),
and the command exits with the shell's code for the signal: 128 + its number (130, 143, 129).

Only the first signal interrupts, and never inside a `deferred()` block (it interrupts as the block ends), nor in
an `until_saved()` block once its probe has `answered()` (its result is in: it is saved first): one arriving while
the run winds down (its probe's processes being ended, the summary printed) is noted and the wind-down goes on, so
it cannot cut the summary short. A SIGINT the shell set to be ignored (a background job of a script) stays
ignored."""
from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
received: list[int] = []  # the signals this process got, in order


class Interrupted(KeyboardInterrupt):
    """A run ended by a signal (KeyboardInterrupt: whatever stops on Ctrl-C stops on it too)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Hold:
    depth = 0  # deferred() blocks running
    raised = False  # Interrupted was raised (once per process)
    saving = False  # in an until_saved() block
    answered = False  # ... whose probe has answered: its result waits for its save


def _raise_first() -> None:
    if received and not _Hold.raised and not _Hold.depth and not _Hold.answered:
        _Hold.raised = True
        raise Interrupted(received[0])


def _interrupt(signum: int, frame: FrameType | None) -> None:
    received.append(signum)
    if signum == signal.SIGHUP:
        _leave_hung_up_terminal()
    _raise_first()


def _leave_hung_up_terminal() -> None:
    """Point stdout and stderr at /dev/null where they are a terminal that hung up (it fails every write, even of
    nothing, with EIO): the wind-down then ends as any interrupt does instead of failing on its first line. A
    SIGHUP sent by hand, with the terminal still there, keeps it."""
    for descriptor in (1, 2):
        try:
            os.write(descriptor, b"")
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, descriptor)
            os.close(null)


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP in this process (the console script's first act)."""
    received.clear()
    _Hold.raised = False
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _interrupt)


def exit_code() -> int:
    """The exit code of an interrupted run: 128 + the first signal's number (130 for a KeyboardInterrupt that no
    signal raised)."""
    return 128 + (received[0] if received else signal.SIGINT)


def run(command: Callable[[], object]) -> None:
    """Run the command line; once a signal has interrupted it, exit with the signal's code whatever the wind-down
    ended with (the commands' 130, or an error writing to the terminal a SIGHUP says is gone). Later signals are
    ignored from then on: Python's exit would give them their default effect, and the exit code theirs."""
    try:
        command()
    finally:
        if received:
            for signum in HANDLED:
                signal.signal(signum, signal.SIG_IGN)
            raise SystemExit(exit_code())


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupt back while the block runs (an append that must be whole, a probe saved and noted): a
    signal that arrives meanwhile interrupts as the block ends. Held in Python, not in the signal mask: a signal
    blocked in the main thread alone would be delivered to another thread (rich's live display runs one) and its
    handler run in the main thread all the same."""
    _Hold.depth += 1
    try:
        yield
    finally:
        _Hold.depth -= 1
    _raise_first()


@contextlib.contextmanager
def until_saved() -> Iterator[None]:
    """A probe run, then saved: a signal interrupts the probe while it runs, but once it has `answered()` (its
    result is in) the signal waits until the block ends (the result saved and noted), and interrupts then."""
    _Hold.saving = True
    try:
        yield
    finally:
        _Hold.saving = _Hold.answered = False
    _raise_first()


def answered() -> None:
    """A probe is over and its result is in: in an `until_saved()` block, hold interrupts back until its end
    (anywhere else, nothing: a device's description or a model's count is not saved)."""
    _Hold.answered = _Hold.saving
