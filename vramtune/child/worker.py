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

    from vramtune.child.blocks import BlockError
    from vramtune.child.building import BuildError, build_checked
    from vramtune.child.counters import MemoryCounters
    from vramtune.child.training import StepRunner, make_optimizer, optimizer_state_ready, state_bytes
    from vramtune.mechanisms import MECHANISMS
    from vramtune.records import Device, ProbeJob
    from vramtune.sources import SOURCES
    from vramtune.strategy import Strategy

    job = ProbeJob.from_json(job_data)
    device, strategy = Device.from_json(job.device), Strategy.from_json(job.strategy)
    source = SOURCES[job.source]
    paddle.set_device(device.paddle_device)
    paddle.seed(job.seed)
    result: dict[str, Any] = {}
    try:
        def configure(config: Any) -> None:
            for mechanism in MECHANISMS:
                mechanism.configure_model(config, strategy, job.block_path)

        built = build_checked(source, source.from_json(job.model), str(Path(job.spec_path).resolve().parent),
                              configure)
        for mechanism in MECHANISMS:
            result.update(mechanism.prepare_model(built.model, strategy, job.block_path))
    except (BuildError, BlockError) as error:
        return {**result, "status": "crashed", "error": f"{job.spec_path}: {error}", "error_kind": "build"}
    model = built.model
    model.train()
    optimizer = make_optimizer(job.optimizer, job.learning_rate, model.parameters())
    runner = StepRunner(model, optimizer, strategy)
    batch = built.make_batch(strategy.micro_batch)

    def loss_fn(data):
        return built.loss(model, data)

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
        return {**result, "status": "oom" if is_oom(error) else "crashed", "error": short_error(error)}
    measured = {**result, "status": "measured", "peak_bytes": peak, "reserved_bytes": reserved,
                "step_seconds": seconds, "samples_per_sec": strategy.batch / seconds,
                "loss": losses[-1] if math.isfinite(losses[-1]) else None, "optimizer_state": state_ready,
                "state_bytes": state_bytes(model, optimizer)}
    if not all(math.isfinite(value) for value in losses):
        measured.update(status="unstable", error=f"non-finite loss: {losses}")
    elif not state_ready:
        measured.update(status="unstable", error=f"the optimizer never stepped in {len(losses) - job.steps} "
                                                 "warmup steps (gradients not finite): its state is not measured")
    return measured


def main(argv: list[str] | None = None) -> int:
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
    write_atomic(args.out, json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
