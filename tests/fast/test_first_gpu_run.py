"""bench/first_gpu_run.py's GPU path over stand-ins for vramtune's answers, the holder process and the driver's
view (no GPU here): each check's line and the exit code. What the checks find on a card is for the card."""
from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT

GiB, MiB = 2**30, 2**20
BUSES = ["0000:3b:00.0", "0000:af:00.0"]


@pytest.fixture
def first_run(monkeypatch):
    spec = importlib.util.spec_from_file_location("first_gpu_run", ROOT / "bench" / "first_gpu_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "gpu_count", lambda: (2, "Paddle 3.3.1, CUDA build"))
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError("no nvidia-smi")))

    class Holder:
        pid = 4242
        stdout = type("Out", (), {"readline": staticmethod(lambda: "ready\n")})()

        def __init__(self, *args, **kwargs):
            pass

        def kill(self):
            pass

        def wait(self):
            return 0
    monkeypatch.setattr(module.subprocess, "Popen", Holder)
    module.failures.clear()
    return module


def answers(rank_peaks=(300 * MiB, 280 * MiB)):
    """What each vramtune command says on a sane 80 GiB card, by its first arguments."""
    doctor = {"device": {"name": "A100", "total_bytes": 80 * GiB, "buses": BUSES}, "seconds": 61.0,
              "checks": [{"name": name, "status": "pass", "figure": "ok"} for name in ("device", "counters")]}

    def vramtune(*args, timeout=0):
        args = [str(a) for a in args]
        if args[0] == "doctor":
            return doctor, ""
        budget = args[args.index("--budget") + 1]
        precision = args[args.index("--precision") + 1] if "--precision" in args else "fp32"
        if "--devices" in args:
            return {"status": "fits", "rank_peak_bytes": list(rank_peaks)}, ""
        if precision == "fp32" and "llama" in args[1]:
            return {"status": "unsupported", "error": "flashmask attention has GPU kernels for float16 and bfloat16 "
                                                      "only"}, ""
        if budget == "256MiB":
            return {"status": "oom", "seconds": 9.0, "error": "MemoryError: Out of memory error on GPU 0. Cannot "
                                                              "allocate 64.0MB"}, ""
        if precision == "bf16-o2":
            return {"status": "fits", "peak_bytes": 500 * MiB, "reserved_bytes": 520 * MiB,
                    "phases": {"import": 3.0, "build": 2.5}}, ""
        if "mlp" in args[1]:
            return {"status": "fits", "budget_bytes": 77 * GiB}, ("note: budget auto: 77.0 GiB, what A100 has free "
                                                                  "now (80.0 GiB card; 3.0 GiB in use, by processes "
                                                                  "4242)\n")
        return {"status": "fits", "peak_bytes": 20 * MiB, "reserved_bytes": 22 * MiB}, ""
    return vramtune


def test_on_a_sane_card_every_check_passes_with_its_figure(first_run, monkeypatch, capsys):
    monkeypatch.setattr(first_run, "vramtune", answers())
    monkeypatch.setattr("sys.argv", ["first_gpu_run.py"])
    assert first_run.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["PASS doctor", "PASS flashmask", "PASS ranks", "PASS o2-build",
                                                      "PASS oom-time", "PASS shared", "PASS first-gpu-run"]
    assert lines[2] == ("PASS ranks: rank 0 peak 300.0 MiB; rank 1 peak 280.0 MiB; nvidia-smi listed no rank process "
                        "(a container's PID namespace?): peaks only")
    assert lines[4].startswith("PASS oom-time: oom in 9.0s (a fitting probe's import and build: 5.5s): MemoryError")


def test_a_rank_reading_another_gpu_fails_the_run(first_run, monkeypatch, capsys):
    monkeypatch.setattr(first_run, "vramtune", answers(rank_peaks=(300 * MiB, 0)))
    monkeypatch.setattr("sys.argv", ["first_gpu_run.py"])
    assert first_run.main() == 1
    out = capsys.readouterr().out
    assert "FAIL ranks: rank 0 peak 300.0 MiB; rank 1 peak 0.0 MiB" in out and "rank 1 read ~0" in out
    assert out.splitlines()[-1].startswith("FAIL first-gpu-run: 1 failed (ranks)")
