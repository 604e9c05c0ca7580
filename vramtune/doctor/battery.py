"""One doctor run: the device check first (it resolves the device every other check measures on), then each
check's parts in children, each judged; a check that cannot run on the device is skipped with the reason. A GPU is
held (the probes' per-device lock; both ranks' GPUs for the ranks check) while its checks measure."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from vramtune import __version__
from vramtune.core.records import Device
from vramtune.doctor.base import FAIL, SKIP, Check, CheckResult, CheckRun, Verdict, device_arg
from vramtune.doctor.checks import checks as every_check
from vramtune.doctor.running import TIMEOUT, Checks
from vramtune.probing.store import devices_locked

Say = Callable[[str], None]


@dataclass
class DoctorResult:
    device: Device | None
    checks: list[CheckResult]
    seconds: float
    when: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    vramtune: str = __version__

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device.to_json() if self.device else None,
                "paddle_version": self.device.paddle_version if self.device else None, "when": self.when,
                "vramtune": self.vramtune, "seconds": round(self.seconds, 2),
                "checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DoctorResult:
        return cls(Device.from_json(data["device"]) if data.get("device") else None,
                   [CheckResult.from_json(c) for c in data["checks"]], data["seconds"], data["when"],
                   data["vramtune"])


def _result(check: Check, verdict: Verdict, runs: dict[str, CheckRun]) -> CheckResult:
    return CheckResult(check.name, check.title, verdict.status, verdict.figure, verdict.meaning,
                       {part: run.figures for part, run in runs.items()},
                       round(sum(run.seconds for run in runs.values()), 2))


def run_check(check: Check, device: Device, checks: Checks) -> CheckResult:
    """Every part of one check on the device, judged (or skipped with the reason)."""
    reason = check.skip(device)
    if reason:
        return _result(check, Verdict(SKIP, "not run", reason), {})
    runs = {part: checks.run(check, device_arg(device), part, check.env(device), TIMEOUT)
            for part in check.parts(device)}
    return _result(check, check.judge(runs, device), runs)


def resolve(request: str, checks: Checks) -> tuple[CheckResult, Device | None]:
    """The device check on what the user asked for ('auto', 'cpu', 'gpu:N'), and the device it found."""
    check = every_check()[0]
    runs = {"": checks.run(check, request, "", {}, TIMEOUT)}
    result = _result(check, check.judge(runs, None), runs)
    found = runs[""].figures.get("device")
    return result, Device.from_json(found) if found and result.status != FAIL else None


def run_doctor(request: str, checks: Checks, say: Say, names: tuple[str, ...] | None = None) -> DoctorResult:
    """The checks named (all by default) on the device asked for, each reported as it finishes."""
    start = time.monotonic()
    first, device = resolve(request, checks)
    say(line(first))
    results = [first]
    chosen = [check for check in every_check()[1:] if names is None or check.name in names]
    if device is None:
        results += [_result(check, Verdict(SKIP, "not run", "no device to check (see the device check)"), {})
                    for check in chosen]
        return DoctorResult(None, results, time.monotonic() - start)
    ranks = max((check.ranks for check in chosen if not check.skip(device)), default=1)
    held = devices_locked(device, ranks, say, f"probing on {device.name}") if device.kind == "gpu" \
        else contextlib.nullcontext()  # CPU peaks are per process: other runs' probes do not move them
    with held:
        for check in chosen:
            results.append(run_check(check, device, checks))
            say(line(results[-1]))
    return DoctorResult(device, results, time.monotonic() - start)


def line(result: CheckResult) -> str:
    """One check in words: status, name, figure, time; on a fail what it means, on a skip why."""
    text = f"{result.status:4}  {result.name:9}  "
    text += result.meaning if result.status == SKIP else f"{result.figure} ({result.seconds:.1f}s)"
    if result.status == FAIL:
        text += f"\n      means: {result.meaning}"
    return text
