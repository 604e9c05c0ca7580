"""The hybrid-parallel layouts' estimate (vramtune/estimating/layouts.py) against each rank's measured peak:
PaddleFormers 1.2's tiny Llama (tests/specs/formers/llama) trained for a few AdamW steps, fp32, eager attention,
on 2 CPU ranks under `python -m paddle.distributed.launch --nproc_per_node 2` (gloo) in each layout, every rank's
host allocator peak read by bench/parallel/rank.py (with bench/parallel/cpu_compat.py's CPU fixes); the estimate's
per-rank prediction of the same layout at fp32, eager attention and no allocator reserve (the allocated bytes the
host counter reads). One process alone first (the data-parallel row of one device).

    python bench/parallel_ranks.py [--layouts single,tp2,tp2sp,pp2,stage2,stage3] [--set num_hidden_layers=4] [--json]
    python bench/parallel_ranks.py --layouts single --workflow tp2,tp2sp   # PaddleFormers' Trainer beside rank.py

Each launch is waited on (its processes' end), never timed; a launch that fails prints its workers' last lines.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from vramtune.estimating.layouts import Setting, layers, stage_peak  # noqa: E402
from vramtune.memory.architecture import architecture, read_config  # noqa: E402
from vramtune.memory.parallel import Layout  # noqa: E402
from vramtune.memory.state import Factors, Given  # noqa: E402

MODEL = ROOT / "tests" / "specs" / "formers" / "llama"
SITE = ROOT / "bench" / "parallel" / "site"
WORKFLOW_KEYS = {"tp2": "tensor_model_parallel_size: 2\n",
                 "tp2sp": "tensor_model_parallel_size: 2\nsequence_parallel: true\n"}
RANK = ROOT / "bench" / "parallel" / "rank.py"
HUNG = 1800  # seconds after which a launch is a hang (for failing only)
MICRO_BATCH, SEQ = 4, 128
# name: (rank.py's arguments, the estimate's layout, processes)
LAYOUTS = {
    "single": ([], Layout(micro_batch=MICRO_BATCH), 1),
    "tp2": (["--tp", "2"], Layout(mp=2, micro_batch=MICRO_BATCH), 2),
    "tp2sp": (["--tp", "2", "--sp"], Layout(mp=2, sp=True, micro_batch=MICRO_BATCH), 2),
    "pp2": (["--pp", "2", "--accumulation", "2"], Layout(pp=2, micro_batch=MICRO_BATCH, accumulation=2), 2),
    "stage2": (["--sharding", "2"], Layout(dp=2, stage=2, micro_batch=MICRO_BATCH), 2),
    # group_sharded_parallel's stage 3 slices only parameters of more than 2**20 elements (PaddleFormers keeps the
    # default): none of the tiny Llama's, which stays whole on every rank
    "stage3": (["--sharding", "3"], Layout(dp=2, stage=3, micro_batch=MICRO_BATCH), 2),
}


def bounded(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`argv` run to its end in a process group of its own; past HUNG seconds (a hang, for failing only: a run ends
    on its own long before, whatever the load) the whole group (a launcher and its ranks) is killed."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kwargs) as process:
        try:
            out, err = process.communicate(timeout=HUNG)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\nkilled after {HUNG} s"
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def measure(args: list[str], processes: int, sizes: dict[str, int], python: str, micro_batch: int = MICRO_BATCH,
            seq: int = SEQ) -> list[dict]:
    """Each rank's report (bench/parallel/rank.py's JSON line), by rank."""
    command = [str(RANK), str(MODEL), "--micro-batch", str(micro_batch), "--seq", str(seq), *args]
    command += [f"--set={key}={value}" for key, value in sizes.items()]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory() as logs:
        if processes == 1:
            run = bounded([python, *command], cwd=ROOT, env=env)
            outputs = [run.stdout + run.stderr]
        else:
            run = bounded([python, "-m", "paddle.distributed.launch", "--log_dir", logs, "--nproc_per_node",
                           str(processes), *command], cwd=ROOT, env=env)
            outputs = [(Path(logs) / f"workerlog.{i}").read_text() for i in range(processes)
                       if (Path(logs) / f"workerlog.{i}").exists()]
    reports = [json.loads(line.split(" ", 1)[1]) for output in outputs for line in output.splitlines()
               if line.startswith("VRAMTUNE_RANK ")]
    if len(reports) != processes:
        tail = "\n".join(line for output in outputs for line in output.splitlines()[-15:])
        raise RuntimeError(f"{' '.join(args) or 'one process'} failed (exit {run.returncode}):\n{tail}")
    if run.returncode:  # gloo's teardown after pipeline parallel's last step: every rank has reported
        print(f"({' '.join(args)}: exit {run.returncode} after every rank reported)", file=sys.stderr)
    return sorted(reports, key=lambda report: report["rank"])


def workflow(name: str, python: str) -> list[dict]:
    """Each rank's report of PaddleFormers' own workflow (`paddleformers.cli.launcher train FILE`, the Trainer) under
    the same launch: configs/formers-sft-lora-cpu.yaml as full fine-tuning for 3 steps with the layout's keys, the
    CPU stand-ins and a report at exit from bench/parallel/site/sitecustomize.py (the host allocator's peak since the
    rank started, and the batch shapes it trained on). max_grad_norm 0: with tensor parallel and clipping PaddleFormers
    1.2 reads `_inner_opt` of the unwrapped optimizer (AttributeError). After training the workflow's save_model calls
    `.cuda()` and the job exits 1 on a CPU: every rank has reported by then."""
    text = (ROOT / "configs" / "formers-sft-lora-cpu.yaml").read_text()
    for old, new in (("lora: true", "lora: false"), ("lora_rank: 8", ""), ("fine_tuning: lora", "fine_tuning: full"),
                     ("max_steps: 4", "max_steps: 3")):
        text = text.replace(old, new)
    text += WORKFLOW_KEYS[name] + "max_grad_norm: 0.0\n"
    launcher = Path(importlib.util.find_spec("paddleformers").origin).parent / "cli" / "launcher.py"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "workflow.yaml"
        config.write_text(text.replace("./checkpoints/formers-sft-lora", str(Path(tmp) / "checkpoints")))
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "VRAMTUNE_BENCH_CPU_COMPAT": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))}
        run = bounded([python, "-m", "paddle.distributed.launch", "--log_dir", str(Path(tmp) / "logs"),
                       "--nproc_per_node", "2", str(launcher), "train", str(config)], cwd=ROOT, env=env)
        outputs = [log.read_text() for log in sorted((Path(tmp) / "logs").glob("workerlog.*"))]
    reports = [json.loads(line.split(" ", 1)[1]) for output in outputs for line in output.splitlines()
               if line.startswith("VRAMTUNE_RANK ")]
    if len(reports) != 2 or not all(report["shapes"] for report in reports):
        tail = "\n".join(line for output in outputs for line in output.splitlines()[-15:])
        raise RuntimeError(f"the workflow with {name} failed (exit {run.returncode}):\n{tail}")
    return sorted(reports, key=lambda report: report["rank"])


def estimate(layout: Layout, sizes: dict[str, int]) -> list[dict]:
    """The estimate's allocated bytes per rank of each pipeline stage (fp32, eager attention, no reserve)."""
    arch = architecture({**read_config(MODEL / "config.json"), **sizes})
    shapes = tuple(layers(arch, SEQ, False))
    setting = Setting(arch, shapes, SEQ, False, "fp32", Given("adamw", False, 1.0), Factors(fragmentation=0.0), 0,
                      sum(layer.split + layer.experts for layer in shapes))
    return [{"peak": (peak := stage_peak(setting, layout, index)).peak, "parts": peak.parts}
            for index in range(layout.pp)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=INT",
                        help="a config.json size instead of the file's (num_hidden_layers=4, hidden_size=128)")
    parser.add_argument("--workflow", default="", help="also PaddleFormers' own workflow in these layouts (tp2,tp2sp) "
                        "beside bench/parallel/rank.py at the workflow's largest batch")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    sizes = {key: int(value) for key, value in (setting.split("=", 1) for setting in args.set)}
    rows = []
    for name in args.layouts.split(","):
        rank_args, layout, processes = LAYOUTS[name]
        predicted = estimate(layout, sizes)
        for report in measure(rank_args, processes, sizes, args.python):
            stage = predicted[report["stage"]]
            rows.append({"layout": name, "rank": report["rank"], "stage": report["stage"],
                         "measured": report["peak"], "estimated": stage["peak"],
                         "ratio": round(stage["peak"] / report["peak"], 4), "params": report["params"],
                         "loss": report["losses"][-1], "parts": stage["parts"]})
            row = rows[-1]
            print(f"{name:7} rank {row['rank']} stage {row['stage']}: measured {row['measured']:>11,} B, "
                  f"estimated {row['estimated']:>11,} B, estimated/measured {row['ratio']:.3f} "
                  f"(params {row['params']:,}, loss {row['loss']:.4f})", file=sys.stderr, flush=True)
    for name in args.workflow.split(",") if args.workflow else []:
        ranks = workflow(name, args.python)
        micro_batch, seq = max(ranks[0]["shapes"], key=lambda shape: shape[0] * shape[1])
        probed = measure(LAYOUTS[name][0], 2, {}, args.python, micro_batch, seq)
        for report, probe in zip(ranks, probed, strict=True):
            rows.append({"layout": f"workflow {name}", "rank": report["rank"], "stage": 0, "measured": report["peak"],
                         "probe": probe["peak"], "ratio": round(report["peak"] / probe["peak"], 4),
                         "shapes": report["shapes"]})
            print(f"workflow {name} rank {report['rank']}: PaddleFormers' Trainer {report['peak']:>11,} B (since "
                  f"start; batches {report['shapes']}), bench/parallel/rank.py at {micro_batch} x {seq} "
                  f"{probe['peak']:>11,} B, workflow/probe {rows[-1]['ratio']:.4f}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"model": str(MODEL.relative_to(ROOT)), "sizes": sizes, "micro_batch": MICRO_BATCH,
                          "seq": SEQ, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
