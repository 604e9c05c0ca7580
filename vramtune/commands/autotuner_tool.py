"""`vramtune autotuner-tool`: where vramtune's memory estimation tool for Paddle's auto_tuner is, and how to use it."""
from __future__ import annotations

from pathlib import Path

import typer

from vramtune.probing.runner import Backend

TOOL = Path(__file__).resolve().parent.parent / "estimating" / "autotuner_tool.py"


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command("autotuner-tool")
    def autotuner_tool(path_only: bool = typer.Option(False, "--path", help="print the path alone")) -> None:
        """Print the path of the memory estimation tool for Paddle's auto_tuner (its tuner config's
        memory_estimation_tool)."""
        if path_only:
            print(TOOL)
            return
        print(f"""{TOOL}

In your auto_tuner config (paddle.distributed.auto_tuner), with max_mem_usage in GB (the tool prints MB):
  "memory_estimation_tool": "{TOOL}",
  "max_mem_usage": 80,
  "model_cfg": {{"hidden_size": 4096, "num_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
                "intermediate_size": 11008, "max_sequence_length": 4096, "global_batch_size": 32}}
Precision (auto_tuner passes none): VRAMTUNE_PRECISION=fp32|O1|O2 (default O2), VRAMTUNE_MASTER_GRAD=1,
VRAMTUNE_KV_HEADS=N (grouped-query attention), VRAMTUNE_SEQUENCE_PARALLEL=1.""")
