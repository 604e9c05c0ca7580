"""`vramtune probe`: resolve the device and budget, run the ladder through saved results, return a report."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from vramtune import runner
from vramtune.search import Outcome, Problem, Progress, Tuner
from vramtune.spec import Problem as SpecProblem
from vramtune.spec import Spec, SpecError
from vramtune.store import ResultStore, spec_key
from vramtune.strategy import Strategy


@dataclass
class Session:
    """A spec bound to a concrete device and budget, with its results store."""

    spec: Spec
    device: dict[str, Any]
    budget_bytes: int
    store: ResultStore


def resolve_budget(spec: Spec, device: dict[str, Any]) -> int:
    """The spec's budget, or the device's total memory for `auto` (GPU only: a CPU budget is virtual)."""
    if spec.budget is not None:
        return spec.budget
    if device["kind"] == "cpu":
        raise SpecError([SpecProblem(spec.path, "budget", "is required on cpu (a size like 512MiB): the CPU "
                                                          "budget is virtual; 'auto' means a GPU's memory")])
    return int(device["total_bytes"])


def open_session(spec: Spec, warn: Callable[[str], None]) -> Session:
    device = runner.describe_device(spec.device)
    budget = resolve_budget(spec, device)
    return Session(spec, device, budget, ResultStore(spec_key(spec.raw, device), warn=warn))


def problem_for(spec: Spec, device: dict[str, Any], budget_bytes: int) -> Problem:
    """What the search needs to know: the target, the candidates, the budget, what the device supports."""
    return Problem(
        target_batch=spec.train.target_batch,
        micro_batches=spec.search.candidate_micro_batches(spec.train.target_batch),
        budget_bytes=budget_bytes, headroom=spec.headroom,
        amp_precisions=list(spec.search.precisions), unsupported=dict(device.get("amp_unsupported", {})),
        recompute=spec.search.recompute == "auto", max_accumulation=spec.search.max_accumulation,
    )


def report(session: Session, outcome: Outcome, seconds: float, reused: int, interrupted: bool) -> dict[str, Any]:
    """The JSON-ready result of a tuning run (also what `apply` reads back)."""
    chosen = outcome.chosen
    keys = ("precision", "micro_batch", "accumulation", "recompute_layers", "recompute_blocks", "recompute_path",
            "peak_bytes", "reserved_bytes", "samples_per_sec", "step_seconds")
    return {
        "spec": session.spec.name,
        "spec_path": session.spec.path,
        "device": {"name": session.device["name"], "kind": session.device["kind"],
                   "total_bytes": session.device["total_bytes"]},
        "paddle_version": session.device["paddle_version"],
        "budget_bytes": session.budget_bytes,
        "headroom": session.spec.headroom,
        "target_batch": session.spec.train.target_batch,
        "chosen": {key: chosen.get(key) for key in keys} if chosen else None,
        "probes": outcome.probes,
        "notes": outcome.notes,
        "closest": outcome.closest,
        "suggestions": outcome.suggestions,
        "reused": reused,
        "interrupted": interrupted,
        "seconds": round(seconds, 2),
    }


def tune(session: Session, progress: Progress, fresh: bool = False) -> dict[str, Any]:
    """Run the ladder; every probe is saved as soon as it finishes. Ctrl-C returns the partial report."""
    start = time.monotonic()
    if fresh:
        session.store.clear()
    saved = session.store.load()
    reused = 0

    def measure(strategy: Strategy) -> dict[str, Any]:
        nonlocal reused
        if strategy in saved:
            reused += 1
            return {**saved[strategy], "reused": True}
        result = runner.measure(session.spec, strategy, session.device, session.budget_bytes)
        if result.get("error_kind") != "build":  # a build error is fixed in code the spec hash cannot see
            session.store.save(result)
        return result

    tuner = Tuner(measure, problem_for(session.spec, session.device, session.budget_bytes), progress)
    interrupted = False
    try:
        outcome = tuner.run()
    except KeyboardInterrupt:
        interrupted = True
        outcome = tuner.finish()
    result = report(session, outcome, time.monotonic() - start, reused, interrupted)
    if not interrupted:
        session.store.save_summary(result)
    return result
