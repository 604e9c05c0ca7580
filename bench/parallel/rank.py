"""One rank of bench/parallel_ranks.py: PaddleFormers 1.2's tiny Llama (tests/specs/formers/llama) trained for a few
AdamW steps, fp32, eager attention, under `python -m paddle.distributed.launch --nproc_per_node N` (gloo) or alone,
in the layout its arguments say; prints one JSON line with this rank's host allocator peak.

    rank.py MODEL --tp 2 [--sp] | --pp 2 | --sharding 2|3   [--micro-batch 4 --seq 128 --accumulation 1 --steps 3]

The peak is Paddle's host allocator peak of the measured steps (`host_memory_stat_peak_value("Allocated", 0)`,
reset after a warm-up step, as vramtune's probes read it: vramtune/child/counters.py), so it holds the state
(weights, gradients, AdamW moments) and the steps' activations. CPU compatibility: bench/parallel/cpu_compat.py
(the tensor-parallel stand-ins imported from vramtune/mechanisms/tensor_parallel/cpu_stand_ins.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import paddle
import paddle.distributed as dist
from paddle.base import core

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_compat

cpu_compat.install()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--sp", action="store_true")
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--sharding", type=int, default=0, help="sharding stage over the data-parallel ranks")
    parser.add_argument("--segment-size", type=int, default=2**20, help="stage 3 slices parameters larger than this")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=INT",
                        help="a config.json size instead of the file's (num_hidden_layers=4, hidden_size=128)")
    args = parser.parse_args()
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    paddle.set_device("cpu")
    from paddle.distributed import fleet

    dp = world // (args.tp * args.pp)
    if world > 1:
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {
            "dp_degree": 1 if args.sharding else dp, "mp_degree": args.tp, "pp_degree": args.pp,
            "sharding_degree": dp if args.sharding else 1,
            "mp_configs": {"need_broadcast_data": False},
            "pp_configs": {"use_batch_p2p_comm": False},
        }
        if args.pp > 1:
            strategy.pipeline_configs = {"accumulate_steps": args.accumulation, "micro_batch_size": args.micro_batch}
        fleet.init(is_collective=True, strategy=strategy)
    from paddleformers.transformers import LlamaConfig, LlamaForCausalLM, LlamaForCausalLMPipe

    config = LlamaConfig.from_pretrained(args.model)
    config.tensor_model_parallel_size = args.tp
    config.sequence_parallel = args.sp
    config.max_sequence_length = args.seq  # read by sequence parallel's attention reshape
    config._attn_implementation = "eager"
    config.pipeline_model_parallel_size = args.pp
    for setting in args.set:
        key, value = setting.split("=", 1)
        setattr(config, key, int(value))
    paddle.seed(23)
    model = (LlamaForCausalLMPipe if args.pp > 1 else LlamaForCausalLM)(config)
    optimizer = paddle.optimizer.AdamW(1e-4, parameters=model.parameters())
    if world > 1 and args.sharding:  # group_sharded_parallel's classes, as PaddleFormers' sharding stage 2/3 builds
        model, optimizer = cpu_compat.group_sharded(model, optimizer, args.sharding, args.segment_size)
    elif world > 1:
        model = fleet.distributed_model(model)
        optimizer = fleet.distributed_optimizer(optimizer)
    batch = args.micro_batch * (args.accumulation if args.pp > 1 else 1)
    generator = paddle.randint(4, config.vocab_size, [batch, args.seq + 1])  # the same on every rank (seed 23)
    inputs, labels = generator[:, :-1], generator[:, 1:]

    def step() -> float:
        if args.pp > 1:
            return float(model.train_batch([inputs, labels], optimizer))
        loss = model(inputs, labels=labels)[0]
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        return float(loss)

    losses = [step()]  # warm-up: gradients and moments created
    core.host_memory_stat_reset_peak_value("Allocated", 0)
    losses += [step() for _ in range(args.steps - 1)]
    peak = core.host_memory_stat_peak_value("Allocated", 0)
    params = sum(int(p.numel()) for p in model.parameters())
    rank = dist.get_rank() if world > 1 else 0
    stage = 0
    if args.pp > 1:
        stage = fleet.get_hybrid_communicate_group().get_stage_id()
    print("VRAMTUNE_RANK " + json.dumps({"rank": rank, "stage": stage, "peak": peak, "params": params,
                                         "losses": losses}), flush=True)


if __name__ == "__main__":
    main()
