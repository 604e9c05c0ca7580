"""The question asked before the card: Llama-2-7B with LoRA r=8, bf16, seq 2048, on a 24 GiB card. Runs
`vramtune estimate` on a configuration-only folder (no weights) and reports its wall time, the peak memory of every
vramtune process together (the CLI, its fork servers and probes, polled from /proc) and the figures.

With --against DIR (a folder holding another `vramtune` package, e.g. `git archive OLD vramtune | tar -x -C DIR`),
both versions answer in turns, --rounds times each (this one first in odd rounds, the other first in even ones): on a
shared machine only their ratio means anything.

    python bench/estimate_7b.py [--card 24GiB] [--against DIR --rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LLAMA_2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
ARGUMENTS = {"model_name_or_path": "./model", "output_dir": "./checkpoints", "per_device_train_batch_size": 16,
             "gradient_accumulation_steps": 1, "max_length": 2048, "lora": True, "lora_rank": 8, "bf16": True,
             "fp16_opt_level": "O2", "learning_rate": 3e-4}


def tree_memory(root: int) -> tuple[int, int]:
    """(resident, proportional) bytes of a process and all its descendants: RSS counts a page each process shares
    (a probe forked from its server shares Paddle's and PaddleNLP's imported pages with it) once per process, PSS
    splits it between them, so their sum is the memory they take together."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        children.setdefault(int(fields["PPid"]), []).append(int(entry.name))
    rss = pss = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            rollup = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                          if line.startswith(("Rss:", "Pss:")))
        except OSError:
            continue
        rss += int(rollup.get("Rss", "0 kB").split()[0]) * 1024
        pss += int(rollup.get("Pss", "0 kB").split()[0]) * 1024
        stack.extend(children.get(pid, []))
    return rss, pss


def _folder(config: dict[str, Any], arguments: dict[str, Any]) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="estimate-bench-"))
    (folder / "model").mkdir()
    (folder / "model" / "config.json").write_text(json.dumps(config))
    (folder / "lora.json").write_text(json.dumps(arguments))
    return folder


def run_estimate(config: dict[str, Any], arguments: dict[str, Any], card: str,
                 package: Path | None = None) -> dict[str, Any]:
    """One `vramtune estimate` (this tree's, or the vramtune package in `package`): wall seconds, CPU seconds of every
    process it started (the CLI reaps its fork servers, they their probes: a measure of the work that other runs on
    the machine do not change much), the process tree's peak RSS and the JSON answer."""
    folder = _folder(config, arguments)
    # a lock of its own: another vramtune run on this machine holding the CPU's lock would add its wait to the time
    env = {**os.environ, "VRAMTUNE_CACHE": str(folder / "cache"), "VRAMTUNE_LOCKS": str(folder / "locks")}
    if package is not None:  # before the editable install's finder (which comes after the path)
        env["PYTHONPATH"] = str(package)
    start, peak, proportional, used = time.monotonic(), 0, 0, _children_cpu()
    with subprocess.Popen([sys.executable, "-m", "vramtune", "estimate", "lora.json", "--card", card, "--json"],
                          cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as process:
        while process.poll() is None:
            rss, pss = tree_memory(process.pid)
            peak, proportional = max(peak, rss), max(proportional, pss)
            time.sleep(0.2)
        out = process.stdout.read() if process.stdout else ""
    wall, cpu = time.monotonic() - start, _children_cpu() - used
    if process.returncode:
        sys.exit(f"vramtune estimate failed with exit code {process.returncode}")
    return {"seconds": wall, "cpu_seconds": cpu, "peak_rss": peak, "peak_pss": proportional, "answer": json.loads(out)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def describe(run: dict[str, Any]) -> str:
    answer = run["answer"]
    best = answer.get("best")
    chosen = (f"{best['precision']} m={best['micro_batch']} k={best['accumulation']} r={best['recomputed_blocks']}, "
              f"{best['reserved_bytes'] / 2**30:.2f} GiB reserved" if best else "nothing fits")
    return (f"{run['seconds']:.1f} s ({run['cpu_seconds']:.1f} CPU s), {run['peak_rss'] / 2**30:.2f} GiB peak RSS "
            f"({run['peak_pss'] / 2**30:.2f} GiB PSS) of the process tree, {answer['probes']} probes; "
            f"predicted best: {chosen}")


def profile(run: dict[str, Any]) -> str:
    """Each probe of an answer that logs them (this tree's): when it ran (seconds from the first probe asked), its
    phases in the child and its activations."""
    lines = []
    for entry in run["answer"].get("probe_log", []):
        what = ", ".join(f"{k} {v}" for k, v in entry["probe"].items() if v not in (None, 0, 1, "full")
                         or k == "micro_batch")
        phases = " ".join(f"{k} {v:.1f}" for k, v in (entry["phases"] or {}).items())
        lines.append(f"    {what}: {entry['started']:.1f}-{entry['ended']:.1f} s ({phases}), activations "
                     f"{(entry['activations'] or 0) / 2**20:.1f} MiB")
    return "\n".join(lines)


def largest_difference(one: dict[str, Any], other: dict[str, Any]) -> float:
    """The largest relative difference between two answers' predicted peaks, over the rows both have (0.3.0 has no
    rows with part of the layers recomputed)."""
    def keyed(run: dict[str, Any]) -> dict[tuple, int]:
        return {(r["precision"], r["micro_batch"], r["recomputed_blocks"], r["sharding_stage"]): r["peak_bytes"]
                for r in run["answer"]["rows"]}
    mine, theirs = keyed(one), keyed(other)
    return max(abs(mine[key] - theirs[key]) / theirs[key] for key in mine.keys() & theirs.keys())


def bench(title: str, config: dict[str, Any], arguments: dict[str, Any]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", default="24GiB")
    parser.add_argument("--against", type=Path, help="a folder holding another vramtune package to compare with")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="each probe's time and phases (this tree's runs)")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
    for index in range(args.rounds):
        order = ["this", "other"] if index % 2 == 0 else ["other", "this"]
        for name in order if args.against else ["this"]:
            run = run_estimate(config, arguments, args.card, args.against if name == "other" else None)
            runs[name].append(run)
            print(f"{title} on {args.card}, {name}: {describe(run)} (load average {os.getloadavg()[0]:.1f})",
                  flush=True)
            if args.profile and name == "this":
                print(profile(run), flush=True)
    if args.against:
        ratios = [t["seconds"] / o["seconds"] for t, o in zip(runs["this"], runs["other"], strict=True)]
        cpu = [t["cpu_seconds"] / o["cpu_seconds"] for t, o in zip(runs["this"], runs["other"], strict=True)]
        print(f"time this/other per round: {', '.join(f'{r:.2f}' for r in ratios)} (median "
              f"{statistics.median(ratios):.2f}); CPU seconds this/other: {', '.join(f'{r:.2f}' for r in cpu)}; "
              f"peak RSS this/other: "
              f"{max(r['peak_rss'] for r in runs['this']) / max(r['peak_rss'] for r in runs['other']):.2f}; "
              f"largest difference between the predicted peaks: "
              f"{max(largest_difference(t, o) for t, o in zip(runs['this'], runs['other'])):.3%} (the rows both have)")


if __name__ == "__main__":
    bench("Llama-2-7B LoRA r=8 bf16 seq 2048", LLAMA_2_7B, ARGUMENTS)
