"""The budget: a child under FLAGS_gpu_memory_limit_mb that allocates past it raises an out-of-memory error that
vramtune classifies as `oom` (not as a crash): this is how a probe over the budget fails on a GPU."""
from __future__ import annotations

from typing import Any

from vramtune.core.records import Device
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict

LIMIT_MB = 256  # the budget the child runs under
STEP_MB = 64  # allocated at a time, up to twice the limit


class BudgetEnforced(Check):
    name = "budget"
    title = "budget enforcement (FLAGS_gpu_memory_limit_mb)"

    def skip(self, device: Device) -> str | None:
        if device.kind != "gpu":
            return ("FLAGS_gpu_memory_limit_mb caps a GPU's allocator; on CPU the budget is judged from the "
                    "measured peak")
        return None

    def env(self, device: Device) -> dict[str, str]:
        return {"FLAGS_gpu_memory_limit_mb": str(LIMIT_MB)}

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        import paddle

        from vramtune.core.oom import is_oom
        from vramtune.core.text import short_error
        from vramtune.doctor.workload import use

        use(device)
        kept, allocated = [], 0
        try:
            while allocated < 2 * LIMIT_MB:
                kept.append(paddle.zeros([STEP_MB * 2**20 // 4], dtype="float32"))
                allocated += STEP_MB
            paddle.device.synchronize(device.paddle_device)
        except Exception as error:  # the probe worker's own classification of what a training step raised
            return {"limit_mb": LIMIT_MB, "allocated_mb": allocated, "raised": short_error(error),
                    "classified": "oom" if is_oom(error) else "crashed"}
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
        return Verdict(PASS, figure + ", classified oom")


CHECK = BudgetEnforced()
