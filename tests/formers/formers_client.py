"""The PaddleFormers tests' client: configs in the shape of PaddleFormers' examples/config/sft/lora.yaml, with a tiny
local model folder (tests/specs/formers/) and the settings PaddleFormers needs on a CPU; and PaddleFormers' own
workflow run on a file, reporting its training peak."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import HUNG, SPECS

FORMERS = SPECS / "formers"
HOOK = Path(__file__).resolve().parent / "hook"
CPU_KEYS = {"device": "cpu", "compute_type": "float32", "amp_master_grad": False, "_attn_implementation": "eager",
            "sharding": ""}


def config_text(model: str = "llama", **keys) -> str:
    """A PaddleFormers SFT config (YAML, with comments), the given keys replacing or adding to it."""
    values = {"train_dataset_type": "erniekit", "train_dataset_path": str(FORMERS / "sft.jsonl"),
              "train_dataset_prob": "1.0", "max_seq_len": 128, "packing": False, "mix_strategy": "concat",
              "model_name_or_path": str(FORMERS / model), "continue_training": False, "stage": "SFT",
              "fine_tuning": "lora", "lora_rank": 8, "seed": 23, "do_train": True, "per_device_train_batch_size": 4,
              "gradient_accumulation_steps": 1, "max_steps": 4, "logging_steps": 1, "output_dir": "./out",
              "save_strategy": "no", "disable_tqdm": True, "learning_rate": 1.0e-4, **CPU_KEYS, **keys}
    lines = ["# a PaddleFormers 1.x config (paddleformers-cli train)", "### data"]
    for key, value in values.items():
        if value is not None:
            lines.append(f"{key}: {json.dumps(value)}" + ("  # one optimizer step" if key == "max_steps" else ""))
    return "\n".join(lines) + "\n"


def write_config(folder: Path, name: str = "sft.yaml", model: str = "llama", **keys) -> Path:
    """A PaddleFormers config written in the folder; its path."""
    path = folder / name
    path.write_text(config_text(model, **keys))
    return path


def workflow_peak(config: Path, cwd: Path, *overrides: str) -> dict:
    """PaddleFormers' own workflow (the one-process form of `paddleformers-cli train`) on the file, from `cwd`,
    with `key=value` overrides; the Trainer's training peak as tests/formers/hook/sitecustomize.py reports it."""
    out = Path(tempfile.mkdtemp(prefix="formers-peak-")) / "peak.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")])),
           "VRAMTUNE_PEAK_FILE": str(out)}
    done = subprocess.run([sys.executable, "-m", "paddleformers.cli.launcher", "train", str(config), *overrides],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=HUNG)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())
