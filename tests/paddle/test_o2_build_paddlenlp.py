"""An AMP O2 probe of a PaddleNLP causal LM builds it as the llm scripts do (finetune_generation.py: AutoConfig and
from_config given bfloat16/float16 when fp16_opt_level is O2); the Trainer scripts' other tasks stay float32. Real
Paddle 2.6 on CPU, the probe's own build path in a fresh process, its parameters created without initialising them
(LazyGuard, as `estimate` counts them: Paddle 2.6 has no CPU bfloat16 random kernel); O2 itself is measured on a GPU
only."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import HUNG, ROOT, SPECS, needs_paddlenlp

pytestmark = [pytest.mark.paddle, needs_paddlenlp]

BUILD = """
import json, sys
import vramtune.child  # zlib before Paddle (vramtune/child/__init__.py)
import paddle
from vramtune.child.building import build_model, built_dtype
from vramtune.child.counting import lazy_parameters
from vramtune.child.preparing import configure
from vramtune.core.strategy import Strategy
from vramtune.plugins import SOURCES
from vramtune.spec import spec_from_dict

paddle.set_device("cpu")
spec = spec_from_dict(json.loads(sys.argv[1]), "spec.yaml")
strategy, source = Strategy(precision="bf16-o2"), SOURCES[spec.source]
with lazy_parameters(paddlenlp=True):  # Paddle 2.6 has no CPU bfloat16 kernel for PaddleNLP's initialisation
    built = build_model(source, spec.model, ".", lambda config: configure(config, strategy, {}),
                        built_dtype(source, strategy))
print(json.dumps({"dtypes": sorted({str(p.dtype) for p in built.model.parameters()}),
                  "config": str(built.config.dtype)}))
"""


def built(config: str, task: str) -> dict:
    spec = {"name": "o2", "device": "cpu", "budget": "64MiB", "train": {"target_batch": 2},
            "model": {"source": "paddlenlp", "config": str(SPECS / config), "task": task}, "data": {"seq_len": 16}}
    done = subprocess.run([sys.executable, "-c", BUILD, json.dumps(spec)], cwd=ROOT, capture_output=True, text=True,
                          timeout=HUNG)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_o2_causal_lm_is_built_in_half_as_the_llm_scripts_build_it():
    assert built("tiny-llama", "causal-lm") == {"dtypes": ["paddle.bfloat16"], "config": "bfloat16"}
    assert built("tiny-bert", "sequence-classification")["dtypes"] == ["paddle.float32"]
