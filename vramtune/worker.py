"""Child-process entry: one isolated probe (or a device description), written as JSON to a file.

    python -m vramtune.worker info  --device auto --out RESULT.json
    python -m vramtune.worker probe --job JOB.json --out RESULT.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

OOM_MARKERS = ("ResourceExhausted", "Out of memory", "out of memory")


def write_json(path: str, payload: dict[str, Any]) -> None:
    """Write atomically: the parent sees the whole result or none."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(payload, handle)
    os.replace(temporary, path)


def is_oom(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or any(marker in str(error) for marker in OOM_MARKERS)


def error_line(text: str, last: bool = False, default: str = "") -> str:
    """The informative line of a (often very long) Paddle error text: one naming an error or an OOM."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    keyed = [line for line in lines if "Error" in line or any(m in line for m in OOM_MARKERS)]
    chosen = keyed or lines or [default]
    return (chosen[-1] if last else chosen[0])[:400]


def short_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error_line(str(error))}"[:400]


def run_info(device: str) -> dict[str, Any]:
    from vramtune.device import describe

    return describe(device).to_json()


def run_probe(job: dict[str, Any]) -> dict[str, Any]:
    """Build the model, apply the strategy, warm up, then measure peak memory and time of whole steps."""
    import paddle

    from vramtune.device import DeviceInfo, MemoryCounters
    from vramtune.models import BuildError, build
    from vramtune.spec import spec_from_dict
    from vramtune.strategy import Strategy
    from vramtune.training import BlockError, StepRunner, apply_recompute, make_optimizer

    info = DeviceInfo(**job["device"])
    strategy = Strategy.from_json(job["strategy"])
    result: dict[str, Any] = {"status": "crashed", "error": None, "error_kind": None, "recompute_blocks": None,
                              "recompute_path": None}
    paddle.set_device(info.paddle_device)
    paddle.seed(job.get("seed", 0))
    spec = spec_from_dict(job["spec"], job["spec_path"])
    try:
        built = build(spec)
        result["recompute_blocks"], result["recompute_path"] = apply_recompute(
            built.model, strategy.recompute_layers, spec.model.recompute_blocks)
    except (BuildError, BlockError) as error:
        return {**result, "error": f"{spec.path}: {error}", "error_kind": "build"}
    model = built.model
    model.train()
    optimizer = make_optimizer(spec.train.optimizer, spec.train.learning_rate, model.parameters())
    runner = StepRunner(model, optimizer, strategy)
    batch = built.make_batch(strategy.micro_batch)

    def loss_fn(data):
        return built.loss(model, data)

    counters = MemoryCounters(info)
    losses: list[float] = []
    try:
        for _ in range(job["warmup"]):  # the optimizer state exists after the first step
            losses.append(runner.train_step(loss_fn, batch))
        counters.synchronize()
        counters.reset()
        start = time.perf_counter()
        for _ in range(job["steps"]):
            losses.append(runner.train_step(loss_fn, batch))
        counters.synchronize()
        seconds = (time.perf_counter() - start) / job["steps"]
        peak, reserved = counters.peak()
    except Exception as error:
        status = "oom" if is_oom(error) else "crashed"
        return {**result, "status": status, "error": short_error(error)}
    used = reserved if reserved is not None else peak
    limit = job["budget_bytes"] * (1 - job["headroom"])
    status = "fits" if used <= limit else "over_budget"
    loss = losses[-1]
    error = None
    if not all(math.isfinite(value) for value in losses):
        status, error = "unstable", f"non-finite loss: {losses}"
    elif status == "over_budget":
        error = f"peak {used} bytes > {int(limit)} bytes (budget less headroom)"
    return {**result, "status": status, "error": error, "peak_bytes": peak, "reserved_bytes": reserved,
            "step_seconds": seconds, "samples_per_sec": strategy.batch / seconds,
            "loss": loss if math.isfinite(loss) else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vramtune.worker")
    parser.add_argument("command", choices=("info", "probe"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--job")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "info":
        from vramtune.device import DeviceUnavailable

        try:
            payload = run_info(args.device)
        except DeviceUnavailable as error:
            payload = {"error": str(error)}
        except Exception as error:  # e.g. a broken Paddle install: say what it raised
            payload = {"error": short_error(error)}
    else:
        with open(args.job, encoding="utf-8") as handle:
            job = json.load(handle)
        try:
            payload = run_probe(job)
        except Exception as error:
            payload = {"status": "oom" if is_oom(error) else "crashed", "error": short_error(error),
                       "error_kind": None}
    write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
