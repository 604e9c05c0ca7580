"""What a doctor check is (Paddle-free): its child-side measurement, its parent-side verdict, and the records that
cross between them."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from vramtune.core.records import Device

PASS, FAIL, SKIP = "pass", "fail", "skip"
MiB = 2**20


@dataclass
class CheckRun:
    """One child of a check: `measured` with its figures, or what happened instead (oom, crashed, timeout)."""

    status: str
    figures: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Verdict:
    """pass / fail / skip, the figure measured in words, and on a fail what it means for vramtune's answers (on a
    skip, why it did not run)."""

    status: str
    figure: str
    meaning: str = ""


@dataclass
class CheckResult:
    name: str
    title: str
    status: str
    figure: str
    meaning: str
    figures: dict[str, Any]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


class Check:
    """One assumption vramtune's measurements rest on. `measure` runs in a child process (it imports Paddle);
    everything else in the parent. A check runs once per part, each part a fresh process (peaks that cannot be
    reset on Paddle 2.6 start clean in each), and `judge` sees every part's run."""

    name = ""
    title = ""
    ranks = 1  # >1: each part runs as that many ranks under paddle.distributed.launch
    calibrates: tuple[str, ...] = ()  # the `estimate` factors a passed run of it measures, in words

    def factors(self, figures: dict[str, dict[str, Any]]) -> dict[str, tuple[str, float]]:
        """From a passed run's figures (by part): `estimate`'s factors it measures, each Factors field -> (its words
        in `calibrates`, its value); a factor the figures do not give is left out (it stays stated)."""
        return {}

    def skip(self, device: Device) -> str | None:
        """Why the check cannot run on this device (checked in the parent, before any child)."""
        return None

    def parts(self, device: Device) -> tuple[str, ...]:
        return ("",)

    def env(self, device: Device) -> dict[str, str]:
        """Extra environment for the check's children (read by Paddle at import)."""
        return {}

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        """In the child: the figures of one part."""
        raise NotImplementedError

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        raise NotImplementedError


def failed_run(runs: dict[str, CheckRun]) -> Verdict | None:
    """A fail naming the first part whose child did not measure, or None when all did."""
    for part, run in runs.items():
        if run.status != "measured":
            where = f" ({part})" if part else ""
            return Verdict(FAIL, f"the check's child{where} ended {run.status}: {run.error or 'no result'}",
                           "vramtune cannot run this on the device: see the error")
    return None


def device_arg(device: Device) -> str:
    return json.dumps(device.to_json())

