"""Put on PYTHONPATH for `python -m paddle.distributed.launch ... -m paddleformers.cli.launcher train FILE` by
bench/parallel_ranks.py's workflow run only: once Paddle is imported by the rank, bench/parallel/cpu_compat.py's CPU
stand-ins are installed, and at exit the rank prints its host allocator peak since start (the Trainer resets
nothing) as one `VRAMTUNE_RANK {...}` line. Does nothing unless VRAMTUNE_BENCH_CPU_COMPAT=1."""
from __future__ import annotations

import os

if os.environ.get("VRAMTUNE_BENCH_CPU_COMPAT") == "1" and "PADDLE_TRAINER_ID" in os.environ:
    import atexit
    import json
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import cpu_compat
    import paddle  # noqa: F401  (the stand-ins patch Paddle's modules)
    from paddle.base import core

    cpu_compat.install()
    cpu_compat.no_broadcast_data()

    from paddleformers.transformers import LlamaForCausalLM

    shapes = []  # each forward's input_ids shape: the batches the workflow trained on
    forward = LlamaForCausalLM.forward

    def recorded(self, input_ids, *args, **kwargs):
        shapes.append(list(input_ids.shape))
        return forward(self, input_ids, *args, **kwargs)

    LlamaForCausalLM.forward = recorded

    def _report() -> None:
        print("VRAMTUNE_RANK " + json.dumps({"rank": int(os.environ["PADDLE_TRAINER_ID"]), "stage": 0,
                                             "peak": core.host_memory_stat_peak_value("Allocated", 0),
                                             "shapes": shapes}), flush=True)

    atexit.register(_report)
