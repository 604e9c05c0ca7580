"""Data parallel's doctor check, for every multi-rank probe (sharding's too): two ranks under
`paddle.distributed.launch` (NCCL), a data-parallel step on each, each rank's peak read (how vramtune's multi-rank
probes measure)."""
from __future__ import annotations

import os
from typing import Any

from vramtune.core.records import Device
from vramtune.core.units import format_bytes
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, MiB, Verdict, failed_run

RANKS = 2
SHM_NEEDED = 512 * MiB  # below this NCCL's shared-memory transport fails or hangs at more ranks (Docker: 64 MiB)


def shm_problem() -> str | None:
    """What is wrong with /dev/shm for NCCL's ranks on one node, or None (NCCL_SHM_DISABLE set: not used)."""
    if os.environ.get("NCCL_SHM_DISABLE", "0") not in ("", "0"):
        return None
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    size = stat.f_frsize * stat.f_blocks
    if size >= SHM_NEEDED:
        return None
    return (f"/dev/shm holds {format_bytes(size)}: NCCL's shared-memory transport between the ranks needs more (at "
            f"least {format_bytes(SHM_NEEDED)}); run the container with --shm-size=1g or more, or set "
            "NCCL_SHM_DISABLE=1")


class Ranks(Check):
    name = "ranks"
    title = "two NCCL ranks"
    ranks = RANKS

    def skip(self, device: Device) -> str | None:
        if device.kind != "gpu" or device.count < RANKS:
            have = f"{device.count} GPU(s)" if device.kind == "gpu" else "no GPU"
            return f"needs {RANKS}+ GPUs (this machine: {have})"
        return None

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        import paddle
        import paddle.distributed as dist

        from vramtune.doctor.workload import BATCH, SEQ, WIDTH, allocated_now, on_this_rank, transformer, use

        local = on_this_rank(device)
        counters = use(local)
        dist.init_parallel_env()
        model = paddle.DataParallel(transformer())
        optimizer = paddle.optimizer.AdamW(learning_rate=1e-4, parameters=model.parameters())

        def step() -> None:
            model(paddle.randn([BATCH, SEQ, WIDTH])).mean().backward()
            optimizer.step()
            optimizer.clear_grad()

        step()  # the optimizer's state now exists
        base = allocated_now(local)
        counters.start()
        step()
        peak, reserved = counters.peak()
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "base": base, "peak": peak,
                "reserved": reserved}

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        failed = failed_run(runs)
        if failed:
            shm = shm_problem()
            return Verdict(FAIL, failed.figure, "multi-rank probes (data parallel, sharding) cannot run here: "
                                                "--devices above 1 would fail" + (f"; {shm}" if shm else ""))
        peaks = runs[""].figures["ranks"]
        figure = ", ".join(f"rank {p['rank']} peak {format_bytes(p['peak'])}" for p in peaks)
        if len(peaks) < RANKS or any(p["world_size"] != RANKS for p in peaks):
            return Verdict(FAIL, figure, f"not every rank reported from a world of {RANKS}: multi-rank probes "
                                         "would read one rank's peak only")
        return Verdict(PASS, figure)


CHECK = Ranks()
