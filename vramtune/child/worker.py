"""Child-process entry: one isolated probe (or a device description), written as JSON to a file.

    python -m vramtune.child.worker info  --device auto --out RESULT.json
    python -m vramtune.child.worker probe --job JOB.json --out RESULT.json
    python -m vramtune.child.worker count --job JOB.json --out RESULT.json   (parameters, never allocated)

A probe measures and reports; it does not judge fit (the parent owns the budget): status `measured`, or what
went wrong (`oom`, `crashed`, `unstable`, `unsupported`, or a build error).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
import zlib  # noqa: F401  before Paddle: 2.6's libpaddle exports its own zlib, which breaks Python's if loaded first
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn

from vramtune.core.errors import BuildError
from vramtune.core.files import write_atomic
from vramtune.core.oom import is_oom
from vramtune.core.records import Device, ProbeJob
from vramtune.core.strategy import Strategy
from vramtune.core.text import short_error
from vramtune.sources.base import BuiltModel

MAX_EXTRA_WARMUP = 8  # warmup steps added while the optimizer state does not exist yet
STARTED = time.monotonic()  # when this process started (a forked probe: when it was forked)
ON_RESULT: Callable[[], Any] | None = None  # called once the result is on disk (the fork server answers then)


class Phases:
    """Wall seconds of each phase of a probe, reported with its result (`phases`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.last = STARTED  # the first phase, import, counts from the process's start

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self.last, 4)
        self.last = now


def run_info(device: str) -> dict[str, Any]:
    from vramtune.child.device import describe

    return describe(device).to_json()


@dataclass
class Run:
    """A probe after its measured training steps: what a mechanism's after_measure phase works with."""

    job: ProbeJob
    strategy: Strategy
    built: BuiltModel
    prepared: Any  # child.preparing.Prepared
    counters: Any  # child.counters.MemoryCounters
    peak_bytes: int  # the training steps' peak


def build(job: ProbeJob, strategy: Strategy, phases: Phases) -> tuple[BuiltModel, Any]:
    """The model, built, prepared by every mechanism, then checked with one sample as it trains (BuildError: bad
    input; KernelUnsupported: the strategy cannot run here)."""
    from vramtune.child.building import build_model, built_dtype, check_one_sample
    from vramtune.child.preparing import configure, prepare
    from vramtune.child.training import make_optimizer
    from vramtune.plugins import SOURCES

    source = SOURCES[job.source]
    for module in source.modules:
        importlib.import_module(module)
    phases.done("import")
    built = build_model(source, source.from_json(job.model), job.spec_dir,
                        lambda config: configure(config, strategy, job.settings), built_dtype(source, strategy))
    phases.done("build")
    built.model.train()
    prepared = prepare(built.model, lambda parameters: make_optimizer(job.optimizer, job.learning_rate, parameters,
                                                                      job.max_grad_norm), strategy, job.settings)
    prepared.runner.after_step = built.after_step
    phases.done("prepare")
    if job.check_sample:
        check_one_sample(built, prepared)
    phases.done("shape_check")
    return built, prepared


def warm_up(job: ProbeJob, prepared: Any, loss_fn: Any, batch: Any) -> tuple[list[float], bool]:
    """Step until the optimizer's state exists (bounded): GradScaler skips steps while gradients are not finite.
    A warmup step is a step's last micro-batches and the optimizer step (StepRunner.warmup_step); a probe that
    measures memory only creates the state without a forward pass (StepRunner.state_step) instead."""
    from vramtune.child.training import optimizer_state_ready

    if job.memory_only:
        prepared.runner.state_step()
        return [], optimizer_state_ready(job.optimizer, prepared.optimizer)
    losses: list[float] = []
    for step in range(job.warmup + MAX_EXTRA_WARMUP):
        if step >= job.warmup and optimizer_state_ready(job.optimizer, prepared.optimizer):
            break
        losses.append(prepared.runner.warmup_step(loss_fn, batch))
    return losses, optimizer_state_ready(job.optimizer, prepared.optimizer)


def rebuild_stop(job: ProbeJob, model: Any, strategy: Strategy) -> Callable[[], bool]:
    """Whether the step ended where backward first rebuilds a block (set up by a mechanism where the job asks)."""
    from vramtune.plugins import MECHANISMS

    if job.until_rebuild:
        for mechanism in MECHANISMS:
            stopped = mechanism.until_rebuild(model, strategy, job.settings.get(mechanism.name))
            if stopped is not None:
                return stopped
    return lambda: False


def run_probe(job_data: dict[str, Any]) -> dict[str, Any]:
    """Build and prepare the model, warm up until the optimizer state exists, measure the training steps, then
    the mechanisms' own phases (evaluation)."""
    phases = Phases()
    import paddle

    from vramtune.child import rank as ranks
    from vramtune.child.building import kernel_unsupported
    from vramtune.child.counters import MemoryCounters
    from vramtune.child.training import state_counts
    from vramtune.mechanisms.base import Unsupported
    from vramtune.plugins import MECHANISMS

    job = ProbeJob.from_json(job_data)
    device, strategy = Device.from_json(job.device), Strategy.from_json(job.strategy)
    ordinal = ranks.device_ordinal(device.index)  # this rank's GPU
    paddle.set_device(device.paddle_device if device.kind == "cpu" else f"gpu:{ordinal}")
    paddle.seed(job.seed)  # every rank builds the same weights
    try:
        built, prepared = build(job, strategy, phases)
    except Unsupported as error:
        return {"status": "unsupported", "error": str(error), "phases": phases.seconds}
    except BuildError as error:
        return {"status": "crashed", "error": f"{job.spec_path}: {error}", "error_kind": "build",
                "phases": phases.seconds}
    paddle.seed(job.seed + ranks.rank() // strategy.tensor_parallel)  # each data-parallel replica its own data
    batch = built.make_batch(strategy.micro_batch)

    def loss_fn(data):
        return built.loss(prepared.network, data)

    counters = MemoryCounters(device.kind, ordinal)
    facts = {**prepared.facts, "phases": phases.seconds}
    losses: list[float] = []
    rebuilt = rebuild_stop(job, prepared.model, strategy)
    try:
        losses, state_ready = warm_up(job, prepared, loss_fn, batch)
        phases.done("warmup")
        if job.memory_only:  # the estimate's probes answer for a card, where a Trainer's read-ahead is host memory
            built.read_ahead = None
        ahead = [built.make_batch(strategy.micro_batch)  # noqa: F841  alive through the steps and the phases after
                 for _ in range(built.read_ahead(strategy.accumulation, True) if built.read_ahead else 0)]
        counters.start()
        start = time.perf_counter()
        for _ in range(job.steps):
            try:
                losses.append(prepared.runner.train_step(loss_fn, batch))
            except Exception:
                if not rebuilt():
                    raise
                break  # the step ended where it was asked to (job.until_rebuild): its peak is measured
        peak, reserved = counters.peak()
        seconds = (time.perf_counter() - start) / job.steps
        phases.done("until_rebuild" if rebuilt() else "steps")  # a step ended early is not a step's time
        run = Run(job, strategy, built, prepared, counters, peak)
        for mechanism in MECHANISMS:
            facts.update(mechanism.after_measure(run, job.settings.get(mechanism.name)))
        phases.done("after")
    except Exception as error:
        if is_oom(error):
            return {**facts, "status": "oom", "error": short_error(error), "reserved_at_oom": counters.reserved_now()}
        reason = str(error) if isinstance(error, Unsupported) else kernel_unsupported(error)
        return {**facts, "status": "unsupported" if reason else "crashed", "error": reason or short_error(error)}
    measured = {**facts, "status": "measured", "peak_bytes": peak, "reserved_bytes": reserved,
                "step_seconds": seconds, "samples_per_sec": strategy.batch / seconds,
                "loss": losses[-1] if losses and math.isfinite(losses[-1]) else None, "optimizer_state": state_ready,
                **state_counts(prepared.model, prepared.optimizer)}
    if not all(math.isfinite(value) for value in losses):
        measured.update(status="unstable", error=f"non-finite loss: {losses}")
    elif not state_ready:
        measured.update(status="unstable", error=f"the optimizer never stepped in {len(losses) - job.steps} "
                                                 "warmup steps (gradients not finite): its state is not measured")
    return measured


def main(argv: list[str] | None = None) -> NoReturn:
    from vramtune.child.rank import die_with_launcher, rank, world_size

    die_with_launcher()
    parser = argparse.ArgumentParser(prog="python -m vramtune.child.worker")
    parser.add_argument("command", choices=("info", "probe", "count"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--job")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "info":
        try:
            payload = run_info(args.device)
        except Exception as error:  # no such device, or a broken Paddle install: say what it raised
            payload = {"error": str(error) if type(error).__name__ == "DeviceUnavailable" else short_error(error)}
    elif args.command == "count":
        from vramtune.child.counting import count

        try:
            payload = count(ProbeJob.from_json(json.loads(Path(args.job).read_text(encoding="utf-8"))))
        except Exception as error:
            payload = {"error": short_error(error)}
    else:
        job = json.loads(Path(args.job).read_text(encoding="utf-8"))
        try:
            payload = run_probe(job)
        except Exception as error:
            payload = {"status": "oom" if is_oom(error) else "crashed", "error": short_error(error)}
    write_atomic(f"{args.out}.rank{rank()}" if world_size() > 1 else args.out, json.dumps(payload))
    sys.stdout.flush()
    sys.stderr.flush()
    if ON_RESULT is not None:
        ON_RESULT()
    os._exit(0)  # the result is on disk: skip the interpreter's teardown (over a second with PaddleNLP loaded)


if __name__ == "__main__":
    main()
