"""Where `vramtune probe` says its choice: the report on stderr ends with the chosen line, and stdout has it once more
for a pipe or a file of its own, but not where both streams meet (a terminal, `2>&1`, make's or CI's log), which
would show it twice. Real Paddle on CPU, the console script's own streams."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import HUNG, SPECS

pytestmark = pytest.mark.paddle

PROBE = [sys.executable, "-m", "vramtune", "probe", str(SPECS / "rung-plain.yaml")]


def test_the_chosen_line_once_where_stdout_and_stderr_meet_and_on_stdout_alone():
    together = subprocess.run(PROBE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=HUNG)
    chosen = [line for line in together.stdout.splitlines() if line.startswith("chosen: ")]
    assert together.returncode == 0 and len(chosen) == 1, together.stdout
    apart = subprocess.run(PROBE, capture_output=True, text=True, timeout=HUNG)  # the saved probes reused
    assert apart.returncode == 0 and apart.stdout == chosen[0] + "\n", apart.stderr
    assert apart.stderr.splitlines().count(chosen[0]) == 1


def test_the_chosen_line_once_on_a_terminal():
    """stdout and stderr both the terminal (`make demo` at a prompt): the report says it, stdout adds nothing."""
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen(PROBE, stdin=terminal, stdout=terminal, stderr=terminal,
                               env={**os.environ, "TERM": "xterm"}, start_new_session=True)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: the probe has exited
            break
        if not chunk:
            break
        output += chunk
    process.wait(timeout=HUNG)
    os.close(controller)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode(errors="replace"))
    assert process.returncode == 0, text[-2000:]
    assert len(re.findall(r"^chosen: ", text, re.MULTILINE)) == 1, text[-2000:]
