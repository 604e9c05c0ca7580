"""An AMP O2 probe builds a PaddleFormers model as the workflow does (sft/workflow.py: AutoConfig, from_config and
create_peft_model given bfloat16/float16 when fp16_opt_level is O2), not in fp32 cast afterwards by decorate: the
weights, LoRA's too, are half from the start, and the build's host peak is what half weights take. Real Paddle on CPU
(the probe's own build path, in a fresh process, as a probe builds); O2 itself is measured on a GPU only."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import HUNG, ROOT, needs_paddleformers
from formers_client import FORMERS, write_config

pytestmark = [pytest.mark.paddle, needs_paddleformers]
MiB = 1 << 20
SLACK = 4 * MiB  # what Paddle and PaddleFormers hold on the host besides the model and its initialisation

BUILD = """
import json, sys
import paddle
from paddle.base import core
from vramtune.child.building import build_model, built_dtype
from vramtune.child.device import describe
from vramtune.child.preparing import configure
from vramtune.core.records import Budget
from vramtune.core.strategy import Strategy
from vramtune.plugins import SOURCES
from vramtune.spec.files import load_spec
from vramtune.tuning.session import job_for

paddle.set_device("cpu")
spec, strategy = load_spec(sys.argv[1]), Strategy(precision=sys.argv[2], micro_batch=1)
job = job_for(spec, strategy, describe("cpu"), Budget(1 << 30, 0.05))
source = SOURCES[job.source]
built = build_model(source, source.from_json(job.model), job.spec_dir,
                    lambda config: configure(config, strategy, job.settings), built_dtype(source, strategy))
named = list(built.model.named_parameters())
print(json.dumps({"dtypes": sorted({str(p.dtype) for _, p in named}),
                  "lora": sorted({str(p.dtype) for name, p in named if "lora" in name}),
                  "params": sum(int(p.size) for _, p in named), "largest": max(int(p.size) for _, p in named),
                  "peak": int(core.host_memory_stat_peak_value("Allocated", 0))}))
"""


def build(config, precision: str) -> dict:
    done = subprocess.run([sys.executable, "-c", BUILD, str(config), precision], cwd=ROOT, capture_output=True,
                          text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def wider_llama(tmp_path):
    """The tiny Llama made 34M parameters deep and wide (its fp32 weights 134 MB), its vocabulary kept small."""
    folder = tmp_path / "llama"
    shutil.copytree(FORMERS / "llama", folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, vocab_size=8000)
    (folder / "config.json").write_text(json.dumps(config))
    return write_config(tmp_path, model_name_or_path=str(folder), lora=True)


@pytest.mark.slow(13)
def test_an_o2_probe_builds_the_model_and_its_lora_in_half(wider_llama):
    half = build(wider_llama, "bf16-o2")
    assert half["dtypes"] == ["paddle.bfloat16"] and half["lora"] == ["paddle.bfloat16"]
    # 2 bytes a parameter, and the initialisation's fp32 draw of one weight at a time (PaddleFormers' init), not
    # fp32's 4 bytes a parameter first
    assert half["peak"] <= 2 * half["params"] + 4 * half["largest"] + SLACK < 4 * half["params"], half
    fp32 = build(wider_llama, "bf16")  # O1 (and fp32): built in fp32, as the workflow builds them
    assert fp32["dtypes"] == ["paddle.float32"] and fp32["peak"] >= 4 * fp32["params"]
