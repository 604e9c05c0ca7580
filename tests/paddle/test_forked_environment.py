"""A probe forked from the warm worker runs in the environment a fresh worker process has after the same imports:
Paddle sets OMP_NUM_THREADS=1 when imported, and a forked probe that lost it trained with MKL on every core
(spinning OpenMP threads), up to 2x slower than a fresh process on a busy machine."""
from __future__ import annotations

import json

import pytest

from vramtune.core.records import Budget
from vramtune.core.strategy import Strategy
from vramtune.probing.runner import ChildBackend
from vramtune.spec import load_spec
from vramtune.tuning.session import job_for

pytestmark = pytest.mark.paddle


def test_a_forked_probe_sees_the_environment_of_a_fresh_worker(tmp_path, monkeypatch):
    (tmp_path / "env_model.py").write_text(
        "import json, os, paddle\n"
        "def build():\n"
        f"    with open({str(tmp_path / 'envs')!r}, 'a') as out:\n"
        "        out.write(json.dumps({k: v for k, v in os.environ.items() if k not in ('VRAMTUNE_PROBE', 'VRAMTUNE_FORK')}) + '\\n')\n"
        "    return paddle.nn.Linear(4, 2)\n")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text("model: {source: python, factory: 'env_model:build'}\n"
                         "data: {inputs: [{shape: [4]}], labels: {shape: [], dtype: int64, high: 2}}\n"
                         "train: {target_batch: 4}\ndevice: cpu\nbudget: 64MiB\nprobe: {steps: 1, warmup: 1}\n")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # as for a user who never set it
    spec = load_spec(spec_path)
    backend = ChildBackend()
    device = backend.describe("cpu")
    budget = Budget(spec.budget, 0.05)
    job = job_for(spec, Strategy(micro_batch=4, accumulation=1), device, budget)
    for fork in ("0", "1"):
        monkeypatch.setenv("VRAMTUNE_FORK", fork)
        assert backend.measure(job, 60, budget).status == "measured"
    backend.fork_server.close()
    fresh, forked = (json.loads(line) for line in (tmp_path / "envs").read_text().splitlines())
    assert fresh["OMP_NUM_THREADS"] == "1"  # Paddle's import set it
    assert forked == fresh
