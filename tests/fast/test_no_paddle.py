"""The parent never imports Paddle: with `import paddle` blocked, --help, validate and a whole probe over a
fake device work."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import CONFIGS, HUNG, ROOT

SCRIPT = textwrap.dedent("""
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("paddle", "paddlenlp"):
                raise ImportError("blocked: " + name)

    sys.meta_path.insert(0, Block())
    sys.path[:0] = [{tests!r}, {root!r}]
    from typer.testing import CliRunner
    from fakes import FakeBackend, FakeDevice
    from vramtune.cli import app, make_app

    runner = CliRunner()
    for application, args in [(app, ["--help"]), (app, ["validate", {spec!r}]),
                              (make_app(FakeBackend(FakeDevice(per_sample=2**20 / 20))), ["probe", {spec!r}, "--json"])]:
        result = runner.invoke(application, args, catch_exceptions=False)
        print(args[0], result.exit_code, len(result.stdout))
    print("paddle imported:", any(name.split(".")[0] == "paddle" for name in sys.modules))
""")


def test_help_validate_and_probe_without_paddle(tmp_path):
    script = SCRIPT.format(tests=str(ROOT / "tests"), root=str(ROOT), spec=str(CONFIGS / "mlp-python-cpu.yaml"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HUNG,
                          env={"VRAMTUNE_CACHE": str(tmp_path / "cache"), "VRAMTUNE_LOCKS": str(tmp_path / "locks"),
                               "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("--help 0 ") and lines[1] == "validate 0 0"
    assert lines[2].startswith("probe 0 ") and int(lines[2].split()[2]) > 100  # a JSON report
    assert lines[3] == "paddle imported: False"
