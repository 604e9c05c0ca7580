"""The budget: a child under FLAGS_gpu_memory_limit_mb that allocates past it raises an out-of-memory error that
vramtune classifies as `oom` (not as a crash): this is how a probe over the budget fails on a GPU."""
from __future__ import annotations

import time
from typing import Any

from vramtune.core.oom import NO_RETRY_ENV
from vramtune.core.records import Device
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict

LIMIT_MB = 256  # the budget the child runs under
STEP_MB = 64  # allocated at a time, up to twice the limit
RETRY_SECONDS = 2.0  # an allocation failing slower than this waited in Paddle's RetryAllocator (10 s by default)


class BudgetEnforced(Check):
    name = "budget"
    title = "budget enforcement (FLAGS_gpu_memory_limit_mb)"

    def skip(self, device: Device) -> str | None:
        if device.kind != "gpu":
            return ("FLAGS_gpu_memory_limit_mb caps a GPU's allocator; on CPU the budget is judged from the "
                    "measured peak")
        return None

    def env(self, device: Device) -> dict[str, str]:
        return {"FLAGS_gpu_memory_limit_mb": str(LIMIT_MB), **NO_RETRY_ENV}

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        import paddle

        from vramtune.core.oom import is_oom
        from vramtune.core.text import short_error
        from vramtune.doctor.workload import use

        use(device)
        kept, allocated = [], 0
        try:
            while allocated < 2 * LIMIT_MB:
                began = time.monotonic()
                kept.append(paddle.zeros([STEP_MB * 2**20 // 4], dtype="float32"))
                allocated += STEP_MB
            paddle.device.synchronize(device.paddle_device)
        except Exception as error:  # the probe worker's own classification of what a training step raised
            return {"limit_mb": LIMIT_MB, "allocated_mb": allocated, "raised": short_error(error),
                    "classified": "oom" if is_oom(error) else "crashed",
                    "seconds": round(time.monotonic() - began, 3)}
        return {"limit_mb": LIMIT_MB, "allocated_mb": allocated, "raised": None, "classified": None}

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        run = runs[""]
        if run.status == "oom":  # the child died of it: the parent's classification of its output said oom
            return Verdict(PASS, f"past {LIMIT_MB} MiB the child ended with an out-of-memory error "
                                 f"({run.error}), classified oom")
        if run.status != "measured":
            return Verdict(FAIL, f"the child ended {run.status}: {run.error}",
                           "a probe over the budget would be reported as a crash, not as over budget: the search "
                           "would treat a memory limit as a broken configuration")
        f = run.figures
        if f["classified"] is None:
            return Verdict(FAIL, f"allocated {f['allocated_mb']} MiB under a {f['limit_mb']} MiB limit without "
                                 "an error", "the budget is not enforced: a probe over the budget runs on the whole "
                                             "card, and budgets below the card are not measured")
        figure = f"past {f['limit_mb']} MiB (at {f['allocated_mb']} MiB): {f['raised']}"
        if f["classified"] != "oom":
            return Verdict(FAIL, figure + f", classified {f['classified']}",
                           "vramtune does not recognise this error as out-of-memory: over-budget probes would be "
                           "reported as crashes, and the search would not look for a smaller configuration")
        waited = f.get("seconds", 0.0)
        if waited > RETRY_SECONDS:
            return Verdict(FAIL, f"{figure}, classified oom, raised after {waited:.1f}s",
                           "the allocator retried before raising (Paddle's RetryAllocator, which vramtune turns off "
                           "with FLAGS_gpu_allocator_retry_time=0): every probe over the budget waits that long")
        return Verdict(PASS, f"{figure}, classified oom, raised in {waited:.2f}s")


CHECK = BudgetEnforced()
