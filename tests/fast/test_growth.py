"""The cost of growth, shown (issue 35): a copy of the package grows a toy dialect and a toy mechanism the way
ARCHITECTURE.md says to add them, and the CLI over a fake device reads, probes, chooses and writes with them. The
files the growth touched are counted: the new folder, and for the mechanism the Strategy's declaration; two lines of
the composition root each."""
from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import CONFIGS, HUNG, ROOT

TESTS = Path(__file__).resolve().parents[1]

TOY_DIALECT = '''"""A toy tool's training file: `toy_trainer: 1`, its batch, how many batches it accumulates, and its AMP key."""
from __future__ import annotations

from pathlib import Path

import yaml

from vramtune.core.report import Report, Tuned
from vramtune.core.spec import Spec
from vramtune.core.strategy import Strategy, dtype_of
from vramtune.dialects.base import Dialect, Format, Reading
from vramtune.dialects.roundtrip import set_keys


def _keys(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _read(path: Path, options: list[str], read_data: bool) -> Reading:
    keys = _keys(path)
    return Reading({"name": path.stem, "device": "cpu",
                    "model": {"source": "python", "factory": "mlp_model:build", "loss": "cross_entropy",
                              "kwargs": {"in_features": 256, "width": 128, "depth": 6, "classes": 10}},
                    "data": {"inputs": [{"shape": [256], "dtype": "float32"}],
                             "labels": {"shape": [], "dtype": "int64", "high": 10}},
                    "train": {"target_batch": keys["batch"] * keys.get("accumulate", 1)},
                    "search": {"precisions": ["bf16-o2", "bf16"] if keys.get("amp") == "bf16" else ["fp32"]}})


def _stated(spec: Spec, device_kind: str) -> Strategy:
    keys = _keys(Path(spec.path))
    precision = "bf16" if keys.get("amp") == "bf16" and device_kind != "cpu" else "fp32"
    return Strategy(precision=precision, micro_batch=keys["batch"], accumulation=keys.get("accumulate", 1))


def _render(spec_path: Path, spec: Spec, report: Report, tuned_file: str) -> tuple[str, list[str]]:
    strategy = Tuned.of(report).strategy
    amp = "bf16" if dtype_of(strategy.precision) == "bf16" else "off"
    changes = {"batch": strategy.micro_batch, "accumulate": strategy.accumulation, "amp": amp}
    return set_keys(spec_path.read_text(encoding="utf-8"), changes, "yaml")[0], []


FORMAT = Format("toy", ".tuned.yaml", _render, trained_by="for toy-train")
DIALECT = Dialect("toy", FORMAT, recognises=lambda path: "toy_trainer" in _keys(path), read=_read, stated=_stated)
'''

TOY_MECHANISM = '''"""Keeps half of each sample's activations (say, offloaded to the host) at a speed cost: an axis of the search."""
from __future__ import annotations

from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Mechanism
from vramtune.memory.line import Term


class HalfActivations(Mechanism):
    name = "half_activations"
    fields = (FIELDS["half_activations"],)
    term = Term()

    def read(self, spec) -> bool:
        return spec.search.get("half_activations", str, "auto", choices=("auto", "off")) != "off"

    def weight(self, strategy) -> int:
        return int(strategy.half_activations)

    def memory_term(self, strategy) -> float:
        return -float(strategy.micro_batch) if strategy.half_activations else 0.0  # saves c bytes per sample

    def levels(self, plain, search):
        return [plain.with_(half_activations=True), plain] if search.settings(self.name) else []


MECHANISM = HalfActivations()
'''

STRATEGY_FIELD = '''    Field("half_activations", bool, False, "--half-activations", "-H", "keep half the activations",
          "half_activations", _flag, label=lambda s, facts: "half" if s.half_activations else ""),
)}'''

RUN = '''
import json, sys
from typer.testing import CliRunner
from fakes import FakeBackend, FakeDevice
from vramtune.cli import make_app

class HalvingDevice(FakeDevice):
    """The fake device knows the toy mechanism's physics: half the activation bytes, 20% slower per sample."""

    def peak(self, s):
        return super().peak(s) - (s.micro_batch * self.per_sample / 2 if getattr(s, "half_activations", False) else 0)

    def speed(self, s):
        return super().speed(s) * (0.8 if getattr(s, "half_activations", False) else 1.0)

device = HalvingDevice(per_sample=2**20 / 10, blocks=0, overhead=0.0)
app, runner, out = make_app(FakeBackend(device)), CliRunner(), []
for arguments in json.loads(sys.argv[1]):
    result = runner.invoke(app, arguments, catch_exceptions=False)
    out.append([result.exit_code, result.stdout, result.stderr])
print(json.dumps(out))
'''


def grown(tmp_path: Path, dialect: bool, mechanism: bool) -> Path:
    """A copy of the package, grown as ARCHITECTURE.md says: a dialect's folder and its two lines in plugins.py; a
    mechanism's module, its field in core/strategy.py and its two lines in plugins.py."""
    root = tmp_path / "copy"
    shutil.copytree(ROOT / "vramtune", root / "vramtune", ignore=shutil.ignore_patterns("__pycache__"))
    package = root / "vramtune"
    plugins = (package / "plugins.py").read_text()
    if dialect:
        (package / "dialects" / "toy").mkdir()
        (package / "dialects" / "toy" / "__init__.py").write_text('"""A toy tool\'s file (tests/fast/test_growth.py)."""\n')
        (package / "dialects" / "toy" / "dialect.py").write_text(TOY_DIALECT)
        plugins = plugins.replace("from vramtune.dialects.spec import dialect as spec_dialect\n",
                                  "from vramtune.dialects.spec import dialect as spec_dialect\n"
                                  "from vramtune.dialects.toy import dialect as toy_dialect\n")
        plugins = plugins.replace("DIALECTS: tuple[Dialect, ...] = (", "DIALECTS: tuple[Dialect, ...] = (toy_dialect.DIALECT, ")
    if mechanism:
        (package / "mechanisms" / "half_activations.py").write_text(TOY_MECHANISM)
        plugins = plugins.replace("from vramtune.mechanisms.base import Mechanism\n",
                                  "from vramtune.mechanisms import half_activations\n"
                                  "from vramtune.mechanisms.base import Mechanism\n")
        plugins = plugins.replace("evaluation.MECHANISM)", "evaluation.MECHANISM, half_activations.MECHANISM)")
        strategy = (package / "core" / "strategy.py").read_text()
        strategy = strategy.replace("\n)}\n", "\n" + STRATEGY_FIELD + "\n", 1)
        strategy = strategy.replace("    to_static: bool = False\n", "    to_static: bool = False\n"
                                    "    half_activations: bool = False\n", 1)
        (package / "core" / "strategy.py").write_text(strategy)
    (package / "plugins.py").write_text(plugins)
    return root


def changed(root: Path) -> dict[str, int]:
    """The files the growth touched (a new one counted by its lines as added) -> the lines changed or added."""
    touched = {}
    for path in sorted((root / "vramtune").rglob("*.py")):
        relative = path.relative_to(root)
        before = (ROOT / relative).read_text().splitlines() if (ROOT / relative).exists() else []
        diff = [line for line in difflib.unified_diff(before, path.read_text().splitlines(), lineterm="", n=0)
                if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        if diff:
            touched[str(relative)] = sum(line.startswith("+") for line in diff)
    return touched


def run(root: Path, *commands: list[str]) -> list[tuple[int, str, str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(TESTS), str(CONFIGS)])}
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps([[str(a) for a in c] for c in commands])],
                          capture_output=True, text=True, env=env, timeout=HUNG, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return [tuple(result) for result in json.loads(done.stdout)]


def test_a_dialect_is_its_folder_and_two_lines_of_the_composition_root(tmp_path):
    root = grown(tmp_path, dialect=True, mechanism=False)
    touched = changed(root)
    assert sorted(touched) == ["vramtune/dialects/toy/__init__.py", "vramtune/dialects/toy/dialect.py",
                               "vramtune/plugins.py"] and touched["vramtune/plugins.py"] == 2
    toy = tmp_path / "train.toy.yaml"
    toy.write_text("# a toy tool's file\ntoy_trainer: 1\nbatch: 2048  # per step\naccumulate: 1\namp: bf16\n")
    out = tmp_path / "tuned.yaml"
    (validate, probe, apply, check) = run(root, ["validate", toy], ["probe", toy, "--budget", "48MiB", "--json"],
                                          ["apply", toy, "--budget", "48MiB", "-o", out],
                                          ["check", out, "--budget", "48MiB"])
    assert validate[0] == 0, validate
    assert probe[0] == 0, probe[2]
    report = json.loads(probe[1])
    chosen = report["chosen"]
    assert chosen["micro_batch"] * chosen["accumulation"] == 2048  # the file's batch x its accumulation
    assert {p["precision"] for p in report["probes"]} == {"fp32", "bf16-o2", "bf16"}  # its AMP key: bf16 searched
    assert apply[0] == 0, apply[2]
    written = out.read_text()
    amp = "bf16" if chosen["precision"].startswith("bf16") else "off"
    assert written.startswith("# a toy tool's file\ntoy_trainer: 1\n") and yaml.safe_load(written)["amp"] == amp
    assert f"batch: {chosen['micro_batch']}  # per step\naccumulate: {chosen['accumulation']}\n" in written
    assert check[0] == 0 and "note: the file's strategy: fp32 " in check[2], check  # a CPU runs fp32


def test_a_mechanism_is_its_module_a_field_and_two_lines_of_the_composition_root(tmp_path):
    root = grown(tmp_path, dialect=False, mechanism=True)
    touched = changed(root)
    assert sorted(touched) == ["vramtune/core/strategy.py", "vramtune/mechanisms/half_activations.py",
                               "vramtune/plugins.py"]
    assert (touched["vramtune/core/strategy.py"], touched["vramtune/plugins.py"]) == (3, 2)
    spec = tmp_path / "spec.yaml"
    spec.write_text((CONFIGS / "mlp-python-cpu.yaml").read_text().replace("budget: 40MiB",
                    "budget: 38MiB\nsearch: {max_accumulation: 8, half_activations: auto}"))
    # no repeated blocks (no recompute), max_accumulation 8: the smallest micro-batch is 256, whose 20 + 256 x 0.1
    # = 45.6 MiB does not fit 38 MiB; with half the activations, 32.8 MiB does
    probe, measure = run(root, ["probe", spec, "--json"], ["measure", spec, "-m", "256", "--half-activations", "--json"])
    assert probe[0] == 0, probe[2]
    report = json.loads(probe[1])
    assert report["chosen"]["half_activations"] is True and report["chosen"]["micro_batch"] == 256
    assert any(p["rung"] == "half_activations" for p in report["probes"])
    assert "fp32 m=256 k=8 r=0 half" in probe[2]  # its label, in the probe table
    assert measure[0] == 0 and json.loads(measure[1])["half_activations"] is True
