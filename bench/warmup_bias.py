"""Whether a probe's short warmup (StepRunner.warmup_step) biases the steps it measures, against a whole step.

    .venv/bin/python bench/warmup_bias.py configs/mlp-python-cpu.yaml --strategy 256x8 --strategy 64x32
    .venv26/bin/python bench/warmup_bias.py configs/bert-mini-cpu.yaml --strategy 4x8 --rounds 5
    .venv/bin/python bench/warmup_bias.py configs/mlp-python-cpu.yaml --strategy 1024x2 --warmups train_step one_sample

Each run is a fresh process, as a probe is: it builds and prepares the spec's model as a probe does, warms up with
a whole step (`train_step`) or with `warmup_step`, then times STEPS training steps one by one (wall and CPU
seconds: the process's CPU time is what a busy machine's scheduling leaves out; Paddle runs one thread on CPU) and
reads the peak after the first two (what a probe with `steps: 2` reports) and after all. The two warmups alternate
round by round. A probe measures the mean of its first steps; steps 3 and on after the first warmup named are the
steady state both are compared with. A strategy is MICROxACCUMULATION in fp32. --warmups compares two of: a whole
step (train_step), warmup_step (a step's last micro-batch and the optimizer step), two_micro_batches (a step's last
two and the optimizer step: warmup_step until 2026-12-02), one_sample (warmup_step on a batch of one sample)."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
import zlib  # noqa: F401  before Paddle (2.6's libpaddle exports its own zlib)
from pathlib import Path

WARMUPS = ("train_step", "warmup_step", "two_micro_batches", "one_sample")


def warm_up(runner, warmup: str, loss_fn, batch, make_batch) -> None:
    if warmup == "two_micro_batches":
        micro_batches = min(2, runner.strategy.accumulation)
        runner.pending = runner.strategy.accumulation - micro_batches
        for _ in range(micro_batches):
            runner.micro_step(loss_fn, batch)
    elif warmup == "one_sample":
        runner.warmup_step(loss_fn, make_batch(1))
    else:
        getattr(runner, warmup)(loss_fn, batch)


def run_child(spec_path: str, micro_batch: int, accumulation: int, warmup: str, steps: int) -> None:
    """One probe-shaped run in this process; prints one JSON line."""
    importlib.import_module("scipy")  # before Paddle: on 2.6, PaddleNLP then fails in scipy otherwise
    import paddle

    from vramtune.child import worker
    from vramtune.child.counters import MemoryCounters
    from vramtune.child.device import describe
    from vramtune.core.records import Budget
    from vramtune.core.strategy import Strategy
    from vramtune.spec.files import load_spec
    from vramtune.tuning.session import job_for

    spec = load_spec(spec_path)
    strategy = Strategy(precision="fp32", micro_batch=micro_batch, accumulation=accumulation)
    job = job_for(spec, strategy, describe("cpu"), Budget(spec.budget, spec.headroom))
    paddle.set_device("cpu")
    paddle.seed(job.seed)
    built, prepared = worker.build(job, strategy, worker.Phases())
    batch = built.make_batch(micro_batch)

    def loss_fn(data):
        return built.loss(prepared.network, data)

    start = time.perf_counter()
    warm_up(prepared.runner, warmup, loss_fn, batch, built.make_batch)
    warm = time.perf_counter() - start
    counters = MemoryCounters("cpu", 0)
    counters.start()
    wall, cpu, peaks = [], [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        prepared.runner.train_step(loss_fn, batch)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        peaks.append(counters.peak()[0])
    print(json.dumps({"warmup": warm, "wall": wall, "cpu": cpu, "peak_2": peaks[1], "peak_all": peaks[-1]}))


def spread(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1000:.1f} ms [{min(values) * 1000:.1f}-{max(values) * 1000:.1f}]"
            if values else "-")


def compare(spec: Path, micro_batch: int, accumulation: int, rounds: int, steps: int, warmups: list[str]) -> None:
    runs: dict[str, list[dict]] = {warmup: [] for warmup in warmups}
    for round_index in range(rounds):
        for warmup in warmups if round_index % 2 == 0 else warmups[::-1]:
            done = subprocess.run([sys.executable, __file__, "--child", str(spec), str(micro_batch),
                                   str(accumulation), warmup, str(steps)],
                                  capture_output=True, text=True, cwd=spec.parent)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            runs[warmup].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"\n{spec.name} m={micro_batch} k={accumulation}, {rounds} runs each; a step's seconds, median [range]")
    for clock in ("wall", "cpu"):
        steady = [statistics.mean(run[clock][2:]) for run in runs[warmups[0]]]
        print(f"  {clock:4}: steady state (steps 3-{steps} after {warmups[0]}) {spread(steady)}")
        for warmup, rows in runs.items():
            measured = [statistics.mean(run[clock][:2]) for run in rows]
            print(f"        steps 1-2 after {warmup:17} {spread(measured)}")
    for warmup, rows in runs.items():
        print(f"  after {warmup:17}: warmup {spread([run['warmup'] for run in rows])} wall; peaks after 2 steps "
              f"{sorted({run['peak_2'] for run in rows})}, after {steps} {sorted({run['peak_all'] for run in rows})}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        spec, micro_batch, accumulation, warmup, steps = sys.argv[2:7]
        run_child(spec, int(micro_batch), int(accumulation), warmup, int(steps))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path)
    parser.add_argument("--strategy", action="append", required=True, help="MICROxACCUMULATION, e.g. 256x8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmups", nargs=2, choices=WARMUPS, default=["train_step", "warmup_step"])
    options = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as Paddle's import sets it in a probe
    for strategy in options.strategy:
        micro_batch, accumulation = (int(part) for part in strategy.split("x"))
        compare(options.spec.resolve(), micro_batch, accumulation, options.rounds, options.steps, options.warmups)


if __name__ == "__main__":
    main()
