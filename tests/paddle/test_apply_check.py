"""`apply`, `check`, the runtime helper and the PaddleNLP export, with real Paddle on CPU."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import CONFIGS, HUNG, ROOT, gpu_present, mlp_spec, needs_paddlenlp

from vramtune.spec.files import MISSING_TUNED

pytestmark = pytest.mark.paddle


# Searched for real, to one answer: without recompute and with accumulation <= 4, only micro-batch 512 fits the 40
# MiB budget (1024 does not), so no test here depends on which configuration CPU timing picks (timing would choose
# among recompute depths and to_static, whose peak is not the same from run to run).
ONE_ANSWER = 'search: {recompute: "off", to_static: "off", max_accumulation: 4}\n'


@pytest.fixture(scope="module")
def tuned_dir(tmp_path_factory):
    """configs/mlp-python-cpu.yaml tuned once for this module (ONE_ANSWER), in its own folder and cache."""
    folder = tmp_path_factory.mktemp("tuned")
    (folder / "mlp.yaml").write_text((CONFIGS / "mlp-python-cpu.yaml").read_text() + ONE_ANSWER)
    return folder


@pytest.fixture
def tuned_file(tuned_dir, cli, monkeypatch):
    monkeypatch.setenv("VRAMTUNE_CACHE", str(tuned_dir / "cache"))
    out = tuned_dir / "mlp.tuned.yaml"
    if not out.exists():
        code, _, err = cli("apply", tuned_dir / "mlp.yaml")
        assert code == 0, err
        assert err.endswith(f"wrote {out}\n")
    return out


def test_apply_writes_spec_plus_tuned_section_keeping_comments(tuned_file):
    text = tuned_file.read_text()
    original = (CONFIGS / "mlp-python-cpu.yaml").read_text()
    assert text.startswith(original.rstrip("\n"))  # comments and key order kept
    tuned = yaml.safe_load(text)["tuned"]
    assert (tuned["precision"], tuned["micro_batch"], tuned["accumulation"], tuned["recomputed_blocks"]) == (
        "fp32", 512, 4, 0)  # the one answer
    assert tuned["peak_bytes"] <= tuned["budget_bytes"] * (1 - tuned["headroom"])
    assert set(tuned) >= {"precision", "recomputed_blocks", "block_path", "reserved_bytes", "samples_per_sec",
                          "device", "paddle_version", "vramtune_version", "date"}


def test_a_tuned_spec_finds_its_factory_where_apply_writes_it(cli, tmp_path, monkeypatch):
    """The factory module beside the spec only (own_mlp, on no PYTHONPATH): -o into another folder is refused before
    any probe (it was written, and `check` on it failed, exit 1: "no longer trains ... no module named 'own_mlp'");
    beside the spec, or with its folder on PYTHONPATH, the written file checks and probes."""
    monkeypatch.setenv("VRAMTUNE_CACHE", str(tmp_path / "cache"))
    own, other = tmp_path / "own", tmp_path / "other"
    own.mkdir()
    other.mkdir()
    shutil.copy(CONFIGS / "mlp_model.py", own / "own_mlp.py")
    spec = own / "mlp.yaml"
    spec.write_text((CONFIGS / "mlp-python-cpu.yaml").read_text().replace('"mlp_model:build"', '"own_mlp:build"')
                    + ONE_ANSWER)
    code, _, err = cli("apply", spec, "-o", other / "mlp.tuned.yaml")
    assert code == 2 and err.startswith(f"error: {spec}: model.factory is found from the spec's folder")
    assert list(other.iterdir()) == []
    code, _, err = cli("apply", spec, "-o", own / "ci.tuned.yaml")
    assert code == 0, err
    for command in ("check", "probe"):
        code, _, err = cli(command, own / "ci.tuned.yaml")
        assert code == 0, err
    monkeypatch.setenv("PYTHONPATH", str(own))
    code, _, err = cli("apply", spec, "-o", other / "mlp.tuned.yaml")
    assert code == 0, err
    code, _, err = cli("check", other / "mlp.tuned.yaml")
    assert code == 0 and err.endswith("check: pass\n"), err


def test_check_passes_then_fails_when_budget_drops_below_peak(tuned_file, cli, tmp_path):
    code, out, err = cli("check", tuned_file, "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "pass" and err.endswith("check: pass\n")
    tuned = yaml.safe_load(tuned_file.read_text())["tuned"]
    small = tmp_path / "small.tuned.yaml"
    budget = tuned["peak_bytes"] // 2
    small.write_text(re.sub(r"^budget: .*$", f"budget: {budget}", tuned_file.read_text(), flags=re.M))
    code, out, err = cli("check", small, "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["status"] == "fail"
    peak = verdict["measured"]["peak_bytes"]
    limit = int(budget * 0.95)
    assert f"peak {peak} bytes" in verdict["reasons"][0] and f"the limit {limit} bytes" in verdict["reasons"][0]
    assert f"error: peak {peak} bytes" in err


def test_check_fails_when_peak_grew_beyond_tolerance(tuned_file, cli, tmp_path):
    tuned = yaml.safe_load(tuned_file.read_text())["tuned"]
    grown = tmp_path / "grown.tuned.yaml"
    grown.write_text(tuned_file.read_text().replace(f"peak_bytes: {tuned['peak_bytes']}",
                                                    f"peak_bytes: {int(tuned['peak_bytes'] * 0.8)}"))
    code, out, _ = cli("check", grown, "--json", "--tolerance", "0.05")
    verdict = json.loads(out)
    assert code == 1 and verdict["reasons"][0].startswith(f"peak grew from {int(tuned['peak_bytes'] * 0.8)} bytes")


def test_apply_twice_without_force_keeps_first_file(tuned_file, cli):
    before = tuned_file.read_bytes()
    code, out, err = cli("apply", tuned_file.with_name("mlp.yaml"))
    assert (code, out, err) == (2, "", f"error: {tuned_file} exists; pass --force to overwrite it\n")
    assert tuned_file.read_bytes() == before


def test_apply_force_on_a_tuned_file_replaces_its_tuned_section(tuned_file, cli, tmp_path):
    again = tmp_path / "again.yaml"
    code, _, err = cli("apply", tuned_file, "-o", again)
    assert code == 0, err
    assert again.read_text().count("\ntuned:") == 1


@needs_paddlenlp
def test_paddlenlp_export_loads_with_pdargumentparser_as_it_is(tuned_file, cli):
    """Whatever CPU timing chose: the file loads as it is, and says a configuration that was measured and fits. The
    MLP's blocks recompute through vramtune's wrapper, which no TrainingArguments key switches on, so a choice with
    recompute is exported as the fastest measured one without (tests/paddle/test_export_loads.py fixes that case)."""
    import scipy  # noqa: F401  on Paddle 2.6, scipy before paddle
    from paddlenlp.trainer import PdArgumentParser, TrainingArguments

    out = tuned_file.with_name("mlp.tuned.json")
    code, stdout, err = cli("apply", tuned_file.with_name("mlp.yaml"), "--format", "paddlenlp", "--force", "--json")
    assert code == 0, err
    applied = json.loads(stdout)
    exported = applied["exported"]
    assert exported["status"] == "fits" and exported["recomputed_blocks"] == 0
    assert (applied["exported_instead_because"] is None) == (applied["chosen"]["recomputed_blocks"] == 0)
    (args,) = PdArgumentParser(TrainingArguments).parse_json_file(str(out))  # unknown keys would be refused
    assert args.per_device_train_batch_size == exported["micro_batch"]
    assert args.gradient_accumulation_steps == exported["accumulation"]
    assert (args.fp16, args.bf16, args.recompute) == (False, False, False)


@pytest.mark.slow(11)
def test_example_training_script_peaks_as_tuned(tuned_file, tmp_path):
    # the tuned file beside its model, in this test's folder: the module's folder keeps no model file, whatever order
    # its tests run in (a model there makes apply -o elsewhere refuse: test_apply_force_on_a_tuned_file_...)
    shutil.copy(CONFIGS / "mlp_model.py", tmp_path / "mlp_model.py")
    tuned_file = shutil.copy(tuned_file, tmp_path / tuned_file.name)
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_tuned.py"), str(tuned_file),
                           "--steps", "20"], capture_output=True, text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == 20
    assert abs(result["peak_bytes"] - result["tuned_peak_bytes"]) <= 0.05 * result["tuned_peak_bytes"]


@pytest.mark.skipif(gpu_present(), reason="asserts what a CPU-only machine does")
def test_gpu_tuned_file_on_cpu_runs_a_smoke_probe(cli, write_spec):
    spec = mlp_spec(device="gpu", budget="auto")
    spec["tuned"] = {"precision": "fp16", "micro_batch": 512, "accumulation": 4, "recomputed_blocks": 2,
                     "total_blocks": 6, "peak_bytes": 10**9, "reserved_bytes": 2 * 10**9,
                     "device": "NVIDIA A100-SXM4-40GB", "device_kind": "gpu"}
    code, out, err = cli("check", write_spec(spec, "gpu.tuned.yaml"), "--json")
    verdict = json.loads(out)
    assert code == 0, err
    assert verdict["status"] == "smoke" and verdict["measured"]["status"] in ("fits", "over_budget")
    assert verdict["measured"]["recomputed_blocks"] == 2 and verdict["measured"]["micro_batch"] == 1
    assert "tuned on NVIDIA A100-SXM4-40GB, which this machine lacks" in verdict["notes"][0]


def test_runtime_load_needs_a_tuned_section(tmp_path):
    from vramtune import runtime
    from vramtune.spec import SpecError
    with pytest.raises(SpecError) as error:
        runtime.load(CONFIGS / "mlp-python-cpu.yaml")
    assert str(error.value) == f"{CONFIGS / 'mlp-python-cpu.yaml'}: tuned: {MISSING_TUNED}"


def test_apply_when_nothing_fits_exits_1_and_writes_nothing(cli):
    from conftest import SPECS
    spec = SPECS / "rung-nothing.yaml"
    out = spec.with_name("rung-nothing.tuned.yaml")
    code, _, err = cli("apply", spec)
    assert code == 1 and not out.exists()
    assert err.splitlines()[-1] == f"error: nothing fits rung-nothing within the budget; see `vramtune probe {spec}`"


@pytest.mark.slow(12)
def test_the_runtime_with_recompute_reproduces_the_probe_peak(cli, tmp_path, monkeypatch):
    from conftest import SPECS
    monkeypatch.setenv("VRAMTUNE_CACHE", str(tmp_path / "cache"))
    # timing picks the recompute depth (every eager one reproduces its peak), never to_static (its peak varies)
    spec = yaml.safe_load((SPECS / "rung-recompute.yaml").read_text())
    spec["search"]["to_static"] = "off"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(CONFIGS / "mlp_model.py", tmp_path / "mlp_model.py")
    code, _, err = cli("apply", tmp_path / "spec.yaml", "-o", tmp_path / "spec.tuned.yaml")
    assert code == 0, err
    tuned = yaml.safe_load((tmp_path / "spec.tuned.yaml").read_text())["tuned"]
    assert tuned["recomputed_blocks"] > 0
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_tuned.py"), str(tmp_path / "spec.tuned.yaml"),
                           "--steps", "6"], capture_output=True, text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert abs(result["peak_bytes"] - tuned["peak_bytes"]) <= 0.05 * tuned["peak_bytes"], (result, tuned)
