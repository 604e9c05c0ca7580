"""vramtune's memory estimation tool for Paddle's auto_tuner (paddle.distributed.auto_tuner, prune.py's
prune_by_memory_estimation): its tuner config names this file as `memory_estimation_tool`, with `max_mem_usage` in GB.

    python autotuner_tool.py --dp_degree 1 --mp_degree 2 --pp_degree 2 --vpp_degree 1 --sharding_degree 2
        --sharding_stage 1 --use_recompute True --micro_batch_size 1 --recompute_granularity full
        --hidden_size 4096 --num_attention_heads 32 --num_layers 32 --max_sequence_length 4096
        --vocab_size 32000 --intermediate_size 11008

prints one number: the estimated per-rank peak in MB (MiB, as auto_tuner multiplies max_mem_usage by 1024); any
message goes to stderr, and a bad flag exits 2. auto_tuner passes no precision: O2 (PaddleNLP's Llama default) unless
VRAMTUNE_PRECISION says fp32, O1 or O2; VRAMTUNE_MASTER_GRAD=1 for amp_master_grad, VRAMTUNE_KV_HEADS for
grouped-query attention, VRAMTUNE_SEQUENCE_PARALLEL=1. Standard library only: auto_tuner runs it with the `python`
on PATH, not necessarily the one vramtune is installed in.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # vramtune's own folder, whichever python runs this

from vramtune.estimating.llama import Llama, Parallel, per_rank_bytes

MODEL_FLAGS = ("hidden_size", "num_attention_heads", "num_layers", "max_sequence_length", "vocab_size",
               "intermediate_size")
STRATEGY_FLAGS = ("dp_degree", "mp_degree", "pp_degree", "vpp_degree", "sharding_degree", "sharding_stage",
                  "micro_batch_size")


def _flag(value: str) -> bool | None:
    """auto_tuner formats booleans with str(): True, False, or None."""
    if value not in ("True", "False", "None"):
        raise argparse.ArgumentTypeError(f"must be True, False or None, got {value!r}")
    return {"True": True, "False": False, "None": None}[value]


def _optional_int(value: str) -> int | None:
    return None if value == "None" else int(value)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="autotuner_tool.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in STRATEGY_FLAGS:
        parser.add_argument(f"--{name}", type=_optional_int, required=True)
    parser.add_argument("--use_recompute", type=_flag, required=True)
    parser.add_argument("--recompute_granularity", choices=("full", "full_attn", "core_attn", "None"), default="None")
    for name in MODEL_FLAGS:
        parser.add_argument(f"--{name}", type=int, required=True)
    return parser.parse_args(argv)


def estimate_mb(args: argparse.Namespace, env: dict[str, str]) -> float:
    model = Llama(args.hidden_size, args.num_layers, args.num_attention_heads, args.vocab_size,
                  args.intermediate_size, args.max_sequence_length,
                  int(env["VRAMTUNE_KV_HEADS"]) if env.get("VRAMTUNE_KV_HEADS") else None)
    parallel = Parallel(micro_batch=args.micro_batch_size or 1, dp=args.dp_degree or 1, mp=args.mp_degree or 1,
                        pp=args.pp_degree or 1, vpp=args.vpp_degree or 1, sharding=args.sharding_degree or 1,
                        stage=args.sharding_stage or 0, recompute=bool(args.use_recompute),
                        granularity=args.recompute_granularity if args.recompute_granularity != "None" else "full",
                        sequence_parallel=env.get("VRAMTUNE_SEQUENCE_PARALLEL") == "1")
    precision = env.get("VRAMTUNE_PRECISION", "O2")
    return per_rank_bytes(model, parallel, precision, env.get("VRAMTUNE_MASTER_GRAD") == "1") / 2**20


def main() -> None:
    args = parse(sys.argv[1:])
    if os.environ.get("VRAMTUNE_PRECISION", "O2") not in ("fp32", "O1", "O2"):
        sys.exit("VRAMTUNE_PRECISION must be fp32, O1 or O2")
    print(f"{estimate_mb(args, dict(os.environ)):.2f}")


if __name__ == "__main__":
    main()
