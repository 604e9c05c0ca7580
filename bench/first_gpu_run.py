"""The first minutes on a real card: what a read of vramtune's GPU path against Paddle's sources predicted would break
there (issue 37), checked on the card. One line per check, `PASS|FAIL|SKIP name: figure`; exit 1 on any FAIL; each
step has a timeout and bench/first_gpu_run.sh ends the whole within 10 minutes.

    bench/first_gpu_run.sh [--device gpu:N]        (from anywhere; it runs from the repository's root)

  doctor     `vramtune doctor` on the card: every check passes (ranks too, with a second GPU)
  flashmask  a PaddleFormers SFT LoRA probe with its default attention (flashmask) fits in bf16, and its fp32 rung is
             unsupported with the flash-attention reason before any probe (item 1)
  ranks      a 2-rank probe: each rank's peak is above 0 and within what nvidia-smi says that rank's process holds on
             its own GPU, and no rank holds memory on another GPU (items 2, 7, 11)
  o2-build   an O2 LoRA probe of a 167M-parameter Llama under a budget below its fp32 weights fits, with reserved
             less than 1 byte a parameter above its peak (item 3)
  oom-time   an out-of-memory probe of the same model raises within 5 s past a fitting probe's import and build, and
             its error gives Paddle's sizes (items 4, 8)
  shared     with another process holding 2 GiB of the card, budget auto leaves it out and says so (item 5)

Without a GPU the doctor runs on the CPU and every GPU check is SKIP with the reason.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # vramtune from this checkout
GiB, MiB = 2**30, 2**20
STEP_TIMEOUT = 240  # seconds a vramtune command may take
WIDE = {"hidden_size": 1024, "intermediate_size": 2752, "num_hidden_layers": 8, "num_attention_heads": 16,
        "num_key_value_heads": 16, "vocab_size": 32000}  # the O2 checks' Llama: 167M parameters
HELD = 2 * GiB  # what the other process holds in `shared`
failures: list[str] = []


def report(status: str, name: str, figure: str) -> None:
    if status == "FAIL":
        failures.append(name)
    print(f"{status} {name}: {figure}", flush=True)


def vramtune(*args: Any, timeout: float = STEP_TIMEOUT) -> tuple[dict[str, Any] | None, str]:
    """(its JSON, stderr) of one vramtune command."""
    done = subprocess.run([sys.executable, "-m", "vramtune", *map(str, args), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    try:
        payload = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        payload = None
    return payload, done.stderr


def gpu_count() -> tuple[int, str]:
    """(GPUs Paddle sees, its version and build) from a child: this process never touches CUDA."""
    code = ("import paddle; print(paddle.__version__, paddle.is_compiled_with_cuda(), "
            "paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    version, cuda, count = done.stdout.split()[-3:]
    return int(count), f"Paddle {version}, {'CUDA' if cuda == 'True' else 'CPU'} build"


def formers_config(folder: Path, model: Path) -> Path:
    """The demo PaddleFormers SFT LoRA config as a GPU user writes it: PaddleFormers' defaults (flashmask, bf16)."""
    text = (ROOT / "configs" / "formers-sft-lora-cpu.yaml").read_text()
    text = text.replace("./tests/specs/formers/llama", str(model))
    text = text.replace("./tests/specs/formers/sft.jsonl", str(ROOT / "tests" / "specs" / "formers" / "sft.jsonl"))
    for line in ("_attn_implementation: eager  # flashmask (the default) has no CPU kernel\n",
                 "compute_type: float32  # bf16 is the default; CPUs train in float32\n", "device: cpu\n"):
        text = text.replace(line, "")
    path = folder / f"{model.name}.yaml"
    path.write_text(text)
    return path


def wide_llama(folder: Path) -> tuple[Path, int]:
    """The tiny Llama's folder made 167M parameters wide; (its folder, its parameter count)."""
    model = folder / "wide-llama"
    model.mkdir()
    for item in (ROOT / "tests" / "specs" / "formers" / "llama").iterdir():
        (model / item.name).write_bytes(item.read_bytes())
    config = {**json.loads((model / "config.json").read_text()), **WIDE}
    (model / "config.json").write_text(json.dumps(config))
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    params = 2 * config["vocab_size"] * hidden + config["num_hidden_layers"] * (4 * hidden**2 + 3 * hidden * inner)
    return model, params


def check_doctor(device: str) -> dict[str, Any] | None:
    result, err = vramtune("doctor", "--device", device)
    if result is None:
        report("FAIL", "doctor", (err.strip().splitlines() or ["no output"])[-1])
        return None
    counts = {status: sum(c["status"] == status for c in result["checks"]) for status in ("pass", "fail", "skip")}
    failed = [f"{c['name']}: {c['figure']}" for c in result["checks"] if c["status"] == "fail"]
    on = (result.get("device") or {}).get("name", device)
    report("FAIL" if failed else "PASS", "doctor", f"on {on}: {counts['pass']} passed, {counts['fail']} failed, "
           f"{counts['skip']} skipped in {result['seconds']:.1f}s" + (f"; {failed[0]}" if failed else ""))
    return result


def check_flashmask(config: Path, device: str) -> None:
    half, err = vramtune("measure", config, "--device", device, "--budget", "auto", "--precision", "bf16",
                               "--micro-batch", 4)
    if half is None or half.get("status") != "fits":
        report("FAIL", "flashmask", f"bf16 with flashmask: {(half or {}).get('status')}: "
                                    f"{(half or {}).get('error') or err.strip()[-300:]}")
        return
    full, err = vramtune("measure", config, "--device", device, "--budget", "auto", "--precision", "fp32",
                               "--micro-batch", 4)
    refused = full is not None and full.get("status") == "unsupported" and "flash" in (full.get("error") or "")
    report("PASS" if refused else "FAIL", "flashmask",
           f"bf16 peak {half['peak_bytes'] / MiB:.1f} MiB (reserved {half['reserved_bytes'] / MiB:.1f} MiB); fp32: "
           f"{(full or {}).get('status')}: {(full or {}).get('error')}")


class DriverView(threading.Thread):
    """nvidia-smi's per-process memory, every 0.2 s, for vramtune's rank processes: (rank, bus id) -> the most MiB."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[tuple[int, str], int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        from vramtune.core.gpu import bus_id

        while not self.done.wait(0.2):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                listed = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id,used_memory",
                                         "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
                for line in listed.stdout.splitlines():
                    pid, bus, used = (cell.strip() for cell in line.split(","))
                    rank = self.rank_of(int(pid))
                    if rank is not None:
                        key = (rank, bus_id(bus))
                        self.seen[key] = max(self.seen.get(key, 0), int(used))

    @staticmethod
    def rank_of(pid: int) -> int | None:
        """A probe's rank (its PADDLE_TRAINER_ID), for a process carrying vramtune's probe marker."""
        try:
            text = Path(f"/proc/{pid}/environ").read_text()
            env = dict(item.split("=", 1) for item in text.split("\0") if "=" in item)
        except OSError:
            return None
        return int(env["PADDLE_TRAINER_ID"]) if "VRAMTUNE_PROBE" in env and "PADDLE_TRAINER_ID" in env else None


def check_ranks(device: str, buses: list[str], index: int) -> None:
    view = DriverView()
    view.start()
    try:
        result, err = vramtune("measure", ROOT / "configs" / "mlp-python-cpu.yaml", "--device", device, "--budget",
                                  "auto", "--micro-batch", 256, "--devices", 2)
    finally:
        view.done.set()
        view.join()
    if result is None or result.get("status") != "fits":
        report("FAIL", "ranks", f"{(result or {}).get('status')}: {(result or {}).get('error') or err.strip()[-300:]}")
        return
    peaks = result["rank_peak_bytes"]
    words, bad = [], []
    for rank, peak in enumerate(peaks):
        own = buses[index + rank] if index + rank < len(buses) else None
        driver = view.seen.get((rank, own)) if own else None
        elsewhere = sorted(bus for (r, bus) in view.seen if r == rank and bus != own)
        words.append(f"rank {rank} peak {peak / MiB:.1f} MiB" + (f", driver {driver} MiB on {own}" if driver else ""))
        if peak < MiB:
            bad.append(f"rank {rank} read ~0 (its counters read another GPU)")
        if driver is not None and peak > driver * MiB:
            bad.append(f"rank {rank}'s peak is above what its process holds")
        if elsewhere:
            bad.append(f"rank {rank} holds memory on {', '.join(elsewhere)} too (a CUDA context on another GPU)")
    if not view.seen:
        words.append("nvidia-smi listed no rank process (a container's PID namespace?): peaks only")
    report("FAIL" if bad else "PASS", "ranks", "; ".join(words + bad))


def check_o2(config: Path, device: str, params: int) -> dict[str, Any] | None:
    budget = int(3.5 * params)  # below the fp32 weights' 4 bytes a parameter
    result, err = vramtune("measure", config, "--device", device, "--budget", f"{budget // MiB}MiB", "--precision",
                              "bf16-o2", "--micro-batch", 1)
    figure = f"{params / 1e6:.0f}M parameters, budget {budget // MiB} MiB (fp32 weights {4 * params // MiB} MiB)"
    if result is None or result.get("status") != "fits":
        report("FAIL", "o2-build", f"{figure}: {(result or {}).get('status')}: "
                                   f"{(result or {}).get('error') or err.strip()[-300:]}")
        return None
    idle = result["reserved_bytes"] - result["peak_bytes"]
    report("FAIL" if idle > params else "PASS", "o2-build",
           f"{figure}: peak {result['peak_bytes'] / MiB:.0f} MiB, reserved {result['reserved_bytes'] / MiB:.0f} MiB "
           f"({idle / params:.2f} B a parameter above the peak)")
    return result


def check_oom_time(config: Path, device: str, fitting: dict[str, Any] | None) -> None:
    result, err = vramtune("measure", config, "--device", device, "--budget", "256MiB", "--precision", "bf16-o2",
                              "--micro-batch", 1)
    if result is None or result.get("status") != "oom":
        report("FAIL", "oom-time", f"{(result or {}).get('status')}: {(result or {}).get('error') or err[-300:]}")
        return
    phases = (fitting or {}).get("phases") or {}
    start = sum(phases.get(name, 0.0) for name in ("import", "build")) if phases else None
    slow = start is not None and result["seconds"] > start + 5
    sizes = "Cannot allocate" in (result.get("error") or "")
    against = f" (a fitting probe's import and build: {start:.1f}s)" if start is not None else ""
    report("FAIL" if slow or not sizes else "PASS", "oom-time",
           f"oom in {result['seconds']:.1f}s{against}: {result['error'][:200]}")


def check_shared(device: str, index: int, total: int) -> None:
    holder = subprocess.Popen([sys.executable, "-c", f"import paddle, time; paddle.set_device('gpu:{index}'); "
                               f"x = paddle.zeros([{HELD // 4}], dtype='float32'); print('ready', flush=True); "
                               "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline().strip() != "ready":
            report("FAIL", "shared", "the process holding 2 GiB did not start")
            return
        result, err = vramtune("measure", ROOT / "configs" / "mlp-python-cpu.yaml", "--device", device,
                                  "--budget", "auto", "--micro-batch", 256)
    finally:
        holder.kill()
        holder.wait()
    said = next((line for line in err.splitlines() if line.startswith("note: budget auto:")), None)
    budget = (result or {}).get("budget_bytes")
    left_out = budget is not None and budget <= total - HELD
    named = said is not None and str(holder.pid) in said
    report("PASS" if left_out and said else "FAIL", "shared",
           f"budget {budget / GiB if budget else 0:.1f} GiB of {total / GiB:.1f}; {said or 'no budget note'}"
           + ("" if named else " (the holder's pid not named: nvidia-smi may not list it in a container)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="gpu:0")
    index = int(parser.parse_args().device.partition(":")[2] or 0)
    device = f"gpu:{index}"
    began = time.monotonic()
    count, paddle = gpu_count()
    with tempfile.TemporaryDirectory(prefix="vramtune-first-run-") as scratch:
        folder = Path(scratch)
        os.environ["VRAMTUNE_CACHE"] = str(folder / "cache")  # nothing saved before is reused, the gate runs
        if count <= index:
            check_doctor("cpu")
            skip_gpu_checks(f"no {device} here ({paddle}, {count} GPU(s))")
        else:
            doctor = check_doctor(device)
            found = (doctor or {}).get("device") or {}
            check_flashmask(formers_config(folder, ROOT / "tests" / "specs" / "formers" / "llama"), device)
            if count > index + 1:
                check_ranks(device, found.get("buses") or [], index)
            else:
                report("SKIP", "ranks", f"needs a second GPU after {device} ({count} here)")
            model, params = wide_llama(folder)
            wide = formers_config(folder, model)
            check_oom_time(wide, device, check_o2(wide, device, params))
            check_shared(device, index, found.get("total_bytes") or 0)
    print(f"{'FAIL' if failures else 'PASS'} first-gpu-run: {len(failures)} failed "
          f"({', '.join(failures) or 'none'}) in {time.monotonic() - began:.0f}s", flush=True)
    return 1 if failures else 0


def skip_gpu_checks(why: str) -> None:
    for name, what in (("flashmask", "flash attention has no CPU kernel; the fp32 refusal is tested over a fake GPU "
                                     "(tests/fast/test_gpu_path.py)"),
                       ("ranks", "NCCL ranks and nvidia-smi need GPUs; 2 CPU ranks run in tests/paddle"),
                       ("o2-build", "AMP O2 is a no-op on a CPU; the half build is tested on CPU "
                                    "(tests/formers/test_o2_build.py)"),
                       ("oom-time", "FLAGS_gpu_memory_limit_mb and the RetryAllocator are the GPU allocator's"),
                       ("shared", "budget auto means a GPU's free memory")):
        report("SKIP", name, f"{why}: {what}")


if __name__ == "__main__":
    sys.exit(main())
