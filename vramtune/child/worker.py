"""Child-process entry: one isolated probe (or a device description), written as JSON to a file.

    python -m vramtune.child.worker info  --device auto --out RESULT.json
    python -m vramtune.child.worker probe --job JOB.json --out RESULT.json

A probe measures and reports; it does not judge fit (the parent owns the budget): status `measured`, or what
went wrong (`oom`, `crashed`, `unstable`, or a build error).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib  # noqa: F401  before Paddle: 2.6's libpaddle exports its own zlib, which breaks Python's if loaded first
from pathlib import Path
from typing import Any

from vramtune.files import write_atomic
from vramtune.text import error_line, looks_like_oom

MAX_EXTRA_WARMUP = 8  # warmup steps added while the optimizer state does not exist yet


def is_oom(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or looks_like_oom(str(error))


def short_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error_line(str(error))}"[:400]


def run_info(device: str) -> dict[str, Any]:
    from vramtune.child.device import describe

    return describe(device).to_json()


def run_probe(job_data: dict[str, Any]) -> dict[str, Any]:
    """Build the model, apply the strategy, warm up until the optimizer state exists, then measure."""
    import paddle

    from vramtune.child import distributed
    from vramtune.child.blocks import BlockError
    from vramtune.child.building import BuildError, build_checked
    from vramtune.child.counters import MemoryCounters
    from vramtune.child.training import StepRunner, make_optimizer, optimizer_state_ready, state_counts
    from vramtune.mechanisms import MECHANISMS
    from vramtune.records import Device, ProbeJob
    from vramtune.sources import SOURCES
    from vramtune.strategy import Strategy

    job = ProbeJob.from_json(job_data)
    device, strategy = Device.from_json(job.device), Strategy.from_json(job.strategy)
    source = SOURCES[job.source]
    paddle.set_device(device.paddle_device if device.kind == "cpu" else f"gpu:{device.index + distributed.rank()}")
    paddle.seed(job.seed)  # every rank builds the same weights
    result: dict[str, Any] = {}
    try:
        def configure(config: Any) -> None:
            for mechanism in MECHANISMS:
                mechanism.configure_model(config, strategy, job.block_path)

        built = build_checked(source, source.from_json(job.model), job.spec_dir, configure)
        for mechanism in MECHANISMS:
            result.update(mechanism.prepare_model(built.model, strategy, job.block_path))
    except (BuildError, BlockError) as error:
        return {**result, "status": "crashed", "error": f"{job.spec_path}: {error}", "error_kind": "build"}
    model = built.model
    model.train()
    optimizer = make_optimizer(job.optimizer, job.learning_rate, model.parameters())
    network = model
    for mechanism in MECHANISMS:  # O2's decorate, data parallel, sharding, to_static
        network, optimizer = mechanism.prepare_training(network, optimizer, strategy)
    runner = StepRunner(network, optimizer, strategy)
    paddle.seed(job.seed + distributed.rank())  # and each its own data
    batch = built.make_batch(strategy.micro_batch)

    def loss_fn(data):
        return built.loss(network, data)

    counters = MemoryCounters(device.kind, device.index)
    losses: list[float] = []
    try:
        for step in range(job.warmup + MAX_EXTRA_WARMUP):
            if step >= job.warmup and optimizer_state_ready(job.optimizer, optimizer):
                break
            losses.append(runner.train_step(loss_fn, batch))
        state_ready = optimizer_state_ready(job.optimizer, optimizer)
        counters.start()
        start = time.perf_counter()
        for _ in range(job.steps):
            losses.append(runner.train_step(loss_fn, batch))
        peak, reserved = counters.peak()
        seconds = (time.perf_counter() - start) / job.steps
    except Exception as error:
        if is_oom(error):
            return {**result, "status": "oom", "error": short_error(error)}
        if strategy.to_static and not losses:  # failed in its first step: the conversion, not the training
            return {**result, "status": "unsupported", "error": f"to_static: the model cannot be converted: "
                                                                f"{short_error(error)}"}
        return {**result, "status": "crashed", "error": short_error(error)}
    measured = {**result, "status": "measured", "peak_bytes": peak, "reserved_bytes": reserved,
                "step_seconds": seconds, "samples_per_sec": strategy.batch / seconds,
                "loss": losses[-1] if math.isfinite(losses[-1]) else None, "optimizer_state": state_ready,
                **state_counts(model, optimizer)}
    if not all(math.isfinite(value) for value in losses):
        measured.update(status="unstable", error=f"non-finite loss: {losses}")
    elif not state_ready:
        measured.update(status="unstable", error=f"the optimizer never stepped in {len(losses) - job.steps} "
                                                 "warmup steps (gradients not finite): its state is not measured")
    return measured


def main(argv: list[str] | None = None) -> int:
    from vramtune.child.distributed import die_with_launcher, rank, world_size

    die_with_launcher()
    parser = argparse.ArgumentParser(prog="python -m vramtune.child.worker")
    parser.add_argument("command", choices=("info", "probe"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--job")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "info":
        try:
            payload = run_info(args.device)
        except Exception as error:  # no such device, or a broken Paddle install: say what it raised
            payload = {"error": str(error) if type(error).__name__ == "DeviceUnavailable" else short_error(error)}
    else:
        job = json.loads(Path(args.job).read_text(encoding="utf-8"))
        try:
            payload = run_probe(job)
        except Exception as error:
            payload = {"status": "oom" if is_oom(error) else "crashed", "error": short_error(error)}
    write_atomic(f"{args.out}.rank{rank()}" if world_size() > 1 else args.out, json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
