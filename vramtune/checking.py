"""`vramtune check`: the CI gate. Re-measure a tuned file's configuration; fail when it no longer fits or its
peak grew. Without the tuned device (a CPU runner checking a GPU-tuned file) run a smoke probe instead."""
from __future__ import annotations

from typing import Any

from vramtune import runner
from vramtune.search import used_bytes
from vramtune.spec import Problem, Spec, SpecError, apply_overrides, require_tuned, spec_from_dict
from vramtune.strategy import Strategy
from vramtune.tuning import resolve_budget
from vramtune.units import format_bytes


def _smoke(spec: Spec, strategy: Strategy, why: str) -> dict[str, Any]:
    """One short CPU step of the file's strategy (micro-batch 1, fp32): proves the spec still builds and trains."""
    raw = apply_overrides(spec.raw, {"device": "cpu", "probe.steps": 1, "probe.warmup": 1})
    cpu_spec = spec_from_dict(raw, spec.path)
    device = runner.describe_device("cpu")
    smoke = Strategy("fp32", 1, min(strategy.accumulation, 2), strategy.recompute_layers)
    result = runner.measure(cpu_spec, smoke, device, int(device["total_bytes"]))
    trained = result["status"] in ("fits", "over_budget")
    reasons = [] if trained else [f"the spec no longer trains: {result['status']}: {result['error']}"]
    notes = [why, f"smoke probe on CPU: {smoke.label()} (AMP and memory are not checked on CPU)"]
    return {"status": "smoke" if trained else "fail", "reasons": reasons, "notes": notes, "measured": result}


def check(spec: Spec, tolerance: float, device: str | None = None) -> dict[str, Any]:
    tuned = require_tuned(spec)
    try:
        strategy = Strategy.from_json(tuned)
    except (KeyError, TypeError, ValueError) as error:
        raise SpecError([Problem(spec.path, "tuned", f"is incomplete or damaged ({error}); rerun vramtune apply")]) \
            from None
    tuned_kind = tuned.get("device_kind", "cpu")
    try:
        info = runner.describe_device(device or spec.device)
    except runner.DeviceError as error:
        if tuned_kind != "gpu":
            raise
        return _smoke(spec, strategy, f"tuned on {tuned.get('device', 'a GPU')}, which this machine lacks ({error})")
    if info["kind"] != tuned_kind:
        return _smoke(spec, strategy, f"tuned on {tuned_kind} ({tuned.get('device')}), running on {info['kind']}")
    budget = resolve_budget(spec, info)
    result = runner.measure(spec, strategy, info, budget)
    limit = budget * (1 - spec.headroom)
    used, before = used_bytes(result), tuned.get("reserved_bytes") or tuned.get("peak_bytes")
    reasons = []
    if result["status"] == "over_budget":
        reasons.append(f"peak {used} bytes ({format_bytes(used)}) no longer fits the limit {int(limit)} bytes "
                       f"({format_bytes(limit)} = budget {budget} less {spec.headroom:.0%} headroom)")
    elif result["status"] != "fits":
        reasons.append(f"the tuned configuration no longer trains: {result['status']}: {result['error']}")
    if used and before and used > before * (1 + tolerance):
        reasons.append(f"peak grew from {before} bytes ({format_bytes(before)}) at tuning to {used} bytes "
                       f"({format_bytes(used)}), +{used / before - 1:.1%} > tolerance {tolerance:.0%}")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "notes": [], "measured": result,
            "tuned_peak_bytes": before, "limit_bytes": int(limit)}
