"""CLI behaviour that needs real processes but no Paddle: the CLI runs in a subprocess over a fake device."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from conftest import CONFIGS, HUNG, ROOT, mlp_spec

RUN_FAKE = textwrap.dedent("""
    import sys
    sys.path[:0] = [{tests!r}, {root!r}]
    from fakes import FakeBackend, FakeDevice
    from vramtune import cli
    cli.app = cli.make_app(FakeBackend(FakeDevice(per_sample=2**20 / 20, saved=2**20 / 400, blocks=6)))
    sys.argv = ["vramtune", *sys.argv[1:]]
    cli.main()
""").format(tests=str(ROOT / "tests"), root=str(ROOT))


def fake_vramtune(*args, env=None, **popen):
    return subprocess.Popen([sys.executable, "-c", RUN_FAKE, *map(str, args)], env={**os.environ, **(env or {})},
                            text=True, **popen)


def test_a_probe_waits_while_another_run_probes_the_same_device():
    from fakes import FakeDevice

    from vramtune.probing.store import device_lock_path, file_lock
    with file_lock(device_lock_path(FakeDevice().device()), print, "probing"):
        process = fake_vramtune("probe", CONFIGS / "mlp-python-cpu.yaml", "--json", stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        line = next((line for line in process.stderr if "waiting" in line), "")  # said, or the run ended
        assert f"another vramtune run (pid {os.getpid()}) is probing on fake cpu; waiting for it to finish" in line
        time.sleep(0.5)
        assert process.poll() is None  # still blocked: nothing measured while the device is taken
    out, _ = process.communicate(timeout=HUNG)
    assert process.returncode == 0 and json.loads(out)["chosen"]


def test_a_holder_whose_pid_is_not_written_yet_is_named_without_one(tmp_path):
    import fcntl

    from vramtune.probing.store import file_lock
    path = tmp_path / "lock"
    holder = os.open(path, os.O_RDWR | os.O_CREAT)  # holds the lock, its pid not written yet
    fcntl.flock(holder, fcntl.LOCK_EX)
    said = []

    def on_wait(message):
        said.append(message)
        os.close(holder)  # the holder finishes: the waiter gets the lock

    with file_lock(path, on_wait, "probing on cpu"):
        assert path.read_text() == str(os.getpid())
    assert said == ["another vramtune run is probing on cpu; waiting for it to finish"]  # was '(pid unknown)'


def test_no_spinner_in_logs_even_under_force_color():
    done = subprocess.run([sys.executable, "-c", RUN_FAKE, "probe", CONFIGS / "mlp-python-cpu.yaml"],
                          capture_output=True, text=True, timeout=HUNG, env={**os.environ, "FORCE_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    assert not any(frame in done.stderr for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
    assert "\x1b[?25l" not in done.stderr  # the cursor is never hidden


def test_an_edited_factory_module_is_probed_again(tmp_path, fake_cli, write_spec):
    module = tmp_path / "my_net.py"
    helper = tmp_path / "my_layers.py"
    helper.write_text("WIDTH = 64\n")
    module.write_text("from my_layers import WIDTH\n\ndef build():\n    return WIDTH\n")
    spec = write_spec(mlp_spec(**{"model.factory": "my_net:build", "model.kwargs": {}}))
    cli, backend = fake_cli(__import__("fakes").FakeDevice(per_sample=2**20 / 20))
    cli("probe", spec)
    first = len(backend.jobs)
    assert cli("probe", spec, "--json")[0] == 0 and len(backend.jobs) == first  # unchanged: reused
    helper.write_text("WIDTH = 2048\n")  # a local module the factory imports
    code, out, _ = cli("probe", spec, "--json")
    assert code == 0 and json.loads(out)["reused"] == 0 and len(backend.jobs) == 2 * first


SLOW_FAKE = RUN_FAKE.replace("cli.main()", """
import time
fake = FakeDevice(per_sample=2**20 / 20, blocks=6)
original = fake.result
fake.result = lambda s, budget: (time.sleep(1.5), original(s, budget))[1]
cli.app = cli.make_app(FakeBackend(fake))
cli.main()""")


def test_ctrl_c_during_the_live_display_restores_the_cursor_and_prints_the_summary_after_it():
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", SLOW_FAKE, "probe", CONFIGS / "mlp-python-cpu.yaml"],
                               stdin=terminal, stdout=terminal, stderr=terminal, env={**os.environ, "TERM": "xterm"},
                               start_new_session=True)
    os.close(terminal)
    output = b""
    while b"\x1b[?25l" not in output:  # the spinner hid the cursor
        output += os.read(controller, 4096)  # blocks until the run writes; raises OSError once it ended
    process.send_signal(2)  # SIGINT, as Ctrl-C
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    process.wait(timeout=HUNG)
    os.close(controller)
    text = output.decode(errors="replace")
    assert process.returncode == 130, text[-2000:]
    hidden, shown = text.index("\x1b[?25l"), text.rindex("\x1b[?25h")
    assert hidden < shown < text.index("finished probes are saved; run again to resume")
