"""The outcome of a tuning run as typed records: the report (`probe --json`, the saved summary `apply` reads) and
the tuned record (`apply`'s `tuned:` section, what `check` and `vramtune.runtime` read back). Dicts only at the
JSON/YAML edges (to_json / from_json)."""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from vramtune import __version__
from vramtune.core.records import Budget, ProbeResult, facts_in
from vramtune.core.strategy import Facts, Strategy


@dataclass
class Report:
    spec: str
    spec_path: str
    device_name: str
    device_kind: str
    device_bytes: int
    paddle_version: str
    budget: Budget
    target_batch: int
    chosen: ProbeResult | None
    probes: list[ProbeResult]
    notes: list[str] = field(default_factory=list)
    closest: ProbeResult | None = None
    suggestions: list[str] = field(default_factory=list)
    reused: int = 0
    interrupted: bool = False
    seconds: float = 0.0
    vramtune: str = __version__
    accumulates: bool = True  # False: the loop trains the micro-batch as its batch (a kit that cannot accumulate)

    @property
    def limit(self) -> float:
        return self.budget.limit

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec, "spec_path": self.spec_path,
            "device": {"name": self.device_name, "kind": self.device_kind, "total_bytes": self.device_bytes},
            "paddle_version": self.paddle_version, "vramtune": self.vramtune,
            "budget_bytes": self.budget.bytes, "headroom": self.budget.headroom, "limit_bytes": int(self.limit),
            "target_batch": self.target_batch,
            "chosen": self.chosen.to_json() if self.chosen else None,
            "probes": [probe.to_json() for probe in self.probes],
            "notes": self.notes,
            "closest": self.closest.to_json() if self.closest else None,
            "suggestions": self.suggestions, "reused": self.reused, "interrupted": self.interrupted,
            "seconds": round(self.seconds, 2), **({} if self.accumulates else {"accumulates": False}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        """Raises KeyError, TypeError or ValueError on a damaged summary."""
        def result(raw: dict[str, Any] | None) -> ProbeResult | None:
            return ProbeResult.from_json(raw) if raw else None

        device = data["device"]
        return cls(spec=data["spec"], spec_path=data["spec_path"], device_name=device["name"],
                   device_kind=device["kind"], device_bytes=device["total_bytes"],
                   paddle_version=data["paddle_version"], budget=Budget(data["budget_bytes"], data["headroom"]),
                   target_batch=data["target_batch"], chosen=result(data["chosen"]),
                   probes=[ProbeResult.from_json(raw) for raw in data["probes"]], notes=list(data["notes"]),
                   closest=result(data["closest"]), suggestions=list(data["suggestions"]), reused=data["reused"],
                   interrupted=data["interrupted"], seconds=data["seconds"], vramtune=data["vramtune"],
                   accumulates=data.get("accumulates", True))


@dataclass
class Tuned:
    """What `apply` records about the choice. Fields besides the strategy may be missing in a hand-written file."""

    strategy: Strategy
    facts: Facts = field(default_factory=dict)
    peak_bytes: int | None = None
    reserved_bytes: int | None = None
    budget_bytes: int | None = None
    headroom: float | None = None
    samples_per_sec: float | None = None
    device: str | None = None
    device_kind: str = "cpu"
    paddle_version: str | None = None
    vramtune_version: str | None = None
    date: str | None = None

    @property
    def used_bytes(self) -> int | None:
        return self.reserved_bytes or self.peak_bytes

    @classmethod
    def of(cls, report: Report) -> Tuned:
        chosen = report.chosen
        assert chosen is not None
        return cls(strategy=chosen.strategy, facts=chosen.facts, peak_bytes=chosen.peak_bytes,
                   reserved_bytes=chosen.reserved_bytes, budget_bytes=report.budget.bytes,
                   headroom=report.budget.headroom, samples_per_sec=round(chosen.samples_per_sec or 0.0, 2),
                   device=report.device_name, device_kind=report.device_kind, paddle_version=report.paddle_version,
                   vramtune_version=__version__, date=datetime.date.today().isoformat())

    def to_json(self) -> dict[str, Any]:
        return {**self.strategy.to_json(), **facts_in(self.facts), "peak_bytes": self.peak_bytes,
                "reserved_bytes": self.reserved_bytes, "budget_bytes": self.budget_bytes, "headroom": self.headroom,
                "samples_per_sec": self.samples_per_sec, "device": self.device, "device_kind": self.device_kind,
                "paddle_version": self.paddle_version, "vramtune_version": self.vramtune_version, "date": self.date}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tuned:
        """Raises ValueError (a field of the wrong type) for a damaged section."""
        optional = {name: data.get(name) for name in ("peak_bytes", "reserved_bytes", "budget_bytes", "headroom",
                                                      "samples_per_sec", "device", "paddle_version",
                                                      "vramtune_version", "date")}
        return cls(strategy=Strategy.from_json(data), facts=facts_in(data),
                   device_kind=data.get("device_kind") or "cpu", **optional)
