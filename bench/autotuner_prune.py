"""Paddle's auto_tuner pruning a Llama-7B search space with vramtune's memory estimation tool: every candidate its
own code generates (default_candidates + search_all over 8 GPUs), pruned by its own prune functions, with and without
the tool, at a 40 GB and an 80 GB card.

    python bench/autotuner_prune.py
"""
from __future__ import annotations

import copy
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from vramtune.commands.autotuner_tool import TOOL  # noqa: E402

LLAMA_7B = {
    "model_cfg": {"hidden_size": 4096, "num_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
                  "intermediate_size": 11008, "max_sequence_length": 4096, "global_batch_size": 32},
    "dp_degree": "auto", "mp_degree": [1, 2, 4, 8], "pp_degree": [1, 2, 4], "vpp_degree": [1],
    "sharding_degree": "auto", "sharding_stage": [1, 2, 3], "micro_batch_size": [1, 2, 4, 8],
    "use_recompute": "auto", "recompute_granularity": ["full", "full_attn", "core_attn"],
    "invalid_strategy": ["stage3_mp*"], "search_algo": {"name": "grid"}, "task_limit": 2000,
    "schedule_mode": "memory", "nodes": 1, "gpus_per_node": 8, "num_gpus": 8,
}


def search(tool: bool, max_mem_gb: int) -> tuple[int, float]:
    from paddle.distributed.auto_tuner.utils import default_candidates, search_all

    config = copy.deepcopy(LLAMA_7B)
    if tool:
        config.update(memory_estimation_tool=str(TOOL), max_mem_usage=max_mem_gb)
    config["candidates"] = default_candidates(config)
    start = time.monotonic()
    return len(search_all(config)), time.monotonic() - start


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="vramtune-python-"))
    (folder / "python").symlink_to(sys.executable)  # auto_tuner runs the literal `python`
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ['PATH']}"
    kept, _ = search(False, 0)
    print("| card | kept without the tool | kept with vramtune's tool | pruned by it | tool time |")
    print("|---|---:|---:|---:|---:|")
    for gb in (40, 80):
        with_tool, seconds = search(True, gb)
        print(f"| {gb} GB | {kept} | {with_tool} | {kept - with_tool} | {seconds:.0f} s |")


if __name__ == "__main__":
    main()
