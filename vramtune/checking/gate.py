"""`vramtune check`: the CI gate. Re-measure a tuned file's configuration; fail when it no longer fits or its
peak grew. Without the tuned device (a CPU runner checking a GPU-tuned file) run a smoke probe instead, or
fail under --strict. A tool's own file (PaddleFormers, PaddleNLP, a kit: no `tuned:` section) is measured at the
strategy it states, against the budget given or recorded in it."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from vramtune.checking.stated import stated_strategy
from vramtune.core.records import Budget, ProbeResult
from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes, format_percent, format_setting
from vramtune.dialects.recorded import recorded_budget, recorded_options
from vramtune.probing.runner import Backend, DeviceError
from vramtune.spec import Problem, Spec, SpecError, apply_overrides, require_tuned, spec_from_dict
from vramtune.tuning.session import Say, measure, open_session

SMOKE_MAX_ACCUMULATION = 2  # a smoke probe proves the step trains, not the memory: keep it short


def _verdict(status: str, measured: ProbeResult | None, reasons: list[str], notes: list[str],
             **more: Any) -> dict[str, Any]:
    return {"status": status, "reasons": reasons, "notes": notes,
            "measured": measured.to_json() if measured else None, **more}


def _smoke_strategy(strategy: Strategy) -> Strategy:
    """The file's strategy shrunk for a smoke probe: fp32 (AMP is not checked on CPU), micro-batch 1, a short
    accumulation, one rank, no sharding."""
    return strategy.with_(precision="fp32", micro_batch=1, devices=1, sharding_stage=0,
                          accumulation=min(strategy.accumulation, SMOKE_MAX_ACCUMULATION))


def _smoke(spec: Spec, strategy: Strategy, backend: Backend, why: str, on_wait: Say) -> dict[str, Any]:
    """One short CPU step of the file's strategy shrunk for a smoke probe: proves the spec still builds and trains."""
    cpu_spec = spec_from_dict(apply_overrides(spec.raw, {"device": "cpu", "probe.steps": 1, "probe.warmup": 1}),
                              spec.path)
    device = backend.describe("cpu")
    session = open_session(cpu_spec, backend, on_wait, device=device, budget_bytes=device.total_bytes)
    smoke = _smoke_strategy(strategy)
    result = measure(session, smoke, on_wait)
    trained = result.measured
    reasons = [] if trained else [f"the spec no longer trains: {result.status}: {result.error}"]
    notes = [why, f"smoke probe on CPU: {smoke.label()} (AMP and memory are not checked on CPU)"]
    return _verdict("smoke" if trained else "fail", result, reasons, notes)


def check(spec: Spec, tolerance: float, backend: Backend, on_wait: Say, device: str | None = None,
          strict: bool = False, devices: int | None = None) -> dict[str, Any]:
    """devices: re-measure on this many ranks instead of the tuned ones (each rank's micro-batch and
    accumulation kept), e.g. a CI runner with fewer GPUs than the training machine."""
    tuned = require_tuned(spec)
    strategy = tuned.strategy
    notes: list[str] = []
    ranks = f"tuned on {strategy.devices} GPUs"
    if devices is not None and devices != strategy.devices:
        ranks = f"--devices {devices} needs {devices} GPUs"
        strategy, notes = _on_ranks(strategy, devices)
    tuned_kind, tuned_name = tuned.device_kind, tuned.device or "a GPU"
    try:
        info = backend.describe(device or spec.device)
    except DeviceError as error:
        if tuned_kind != "gpu":
            raise
        missing = f"tuned on {tuned_name}, which this machine lacks ({error})"
    else:
        missing = None if info.kind == tuned_kind else f"tuned on {tuned_kind} ({tuned_name}), running on {info.kind}"
        if not missing and info.kind == "gpu" and strategy.devices > info.count:
            missing = f"{ranks}, this machine has {info.count}"
    if missing:
        if strict:
            return _verdict("fail", None, [f"{missing}; --strict needs the tuned device"], notes)
        verdict = _smoke(spec, strategy, backend, missing, on_wait)
        verdict["notes"] = notes + verdict["notes"]
        return verdict
    # `budget: auto` would follow the runner's card; the budget the file was tuned for is what must hold
    budget_bytes = spec.budget if spec.budget is not None else tuned.budget_bytes
    session = open_session(spec, backend, on_wait, device=info, budget_bytes=budget_bytes)
    result = measure(session, strategy, on_wait)
    verdict = judge(result, session.budget, tuned, tolerance)
    verdict["notes"] = notes + verdict["notes"]
    return verdict


def is_tool_file(spec: Spec) -> bool:
    """A PaddleFormers, PaddleNLP or kit file: written back by apply in the tool's own format, without tuned:."""
    return not spec.tuned and spec.dialect != "spec"


def check_file(spec: Spec, backend: Backend, on_wait: Say, device: str | None = None,
               devices: int | None = None, options: list[str] | None = None) -> dict[str, Any]:
    """A tool's own file: its stated strategy measured here against --budget (spec.budget) or the budget the file
    records; pass when the peak fits. `options`: the config's own overrides given; those the file records as tuned
    with and not given are said."""
    text = Path(spec.path).read_text(encoding="utf-8")
    budget_bytes = spec.budget or recorded_budget(text)
    if budget_bytes is None:
        raise SpecError([Problem(spec.path, "--budget", "is required: the file records no budget (give the one "
                                                        "it must fit, e.g. --budget 24GiB)")])
    info = backend.describe(device or spec.device)
    strategy = stated_strategy(spec, info.kind)
    notes = [f"the file's strategy: {strategy.label()} ({'--budget' if spec.budget else 'the budget it records'} "
             f"{format_bytes(budget_bytes)})"]
    missing = [option for option in recorded_options(text) if option not in (options or [])]
    if missing:
        notes.append(f"tuned with {' '.join(f'-O {shlex.quote(option)}' for option in missing)} (its first line), not "
                     "given here: measured without them")
    if devices is not None and devices != strategy.devices:
        strategy, more = _on_ranks(strategy, devices)
        notes += more
    session = open_session(spec, backend, on_wait, device=info, budget_bytes=budget_bytes)
    verdict = judge(measure(session, strategy, on_wait), session.budget, Tuned(strategy=strategy), 0.0)
    verdict["notes"] = notes + verdict["notes"]
    return verdict


def _on_ranks(strategy: Strategy, devices: int) -> tuple[Strategy, list[str]]:
    """The tuned strategy on another number of ranks (each rank's micro-batch and accumulation kept; sharding's stage
    where there are ranks to split over), and what that changes in the verdict: the samples per step, and what a pass
    or a fail then says of the tuned ranks."""
    notes = [f"measured on {devices} rank{'s' if devices > 1 else ''}, tuned on {strategy.devices}: each rank's "
             f"micro-batch and accumulation as tuned, {strategy.micro_batch * strategy.accumulation * devices} "
             f"samples per step instead of {strategy.batch}"]
    tuned_stage = strategy.sharding_stage
    stage = tuned_stage if devices > 1 else 0
    if stage:
        fewer = devices < strategy.devices
        notes.append(f"sharding stage {stage} splits the state over {devices} ranks, not {strategy.devices}: each rank "
                     f"holds {'more' if fewer else 'less'} than it will in training, so "
                     + ("a pass holds there and a fail may not" if fewer else "a fail holds there and a pass may not"))
    elif tuned_stage:
        notes.append(f"sharding stage {tuned_stage} needs 2 ranks or more: measured without it, and without data "
                     "parallel's gradient buffers, so a pass may not hold on the tuned ranks")
    elif devices == 1:
        notes.append("one rank runs without data parallel's gradient buffers: a pass may not hold on the tuned ranks")
    return strategy.with_(devices=devices, sharding_stage=stage), notes


def judge(result: ProbeResult, budget: Budget, tuned: Tuned, tolerance: float) -> dict[str, Any]:
    """pass, or fail with every reason: no longer fits, no longer trains, or the peak grew past the tolerance."""
    used, before = result.used_bytes, tuned.used_bytes
    reasons = []
    if result.status == "over_budget":
        reasons.append(f"peak {used} bytes ({format_bytes(used)}) no longer fits the limit {int(budget.limit)} bytes "
                       f"({format_bytes(budget.limit)} = budget {budget.bytes} less "
                       f"{format_setting(budget.headroom)} headroom)" if not budget.fits(used) else
                       f"no longer fits: {result.error}")
    elif result.status != "fits":
        reasons.append(f"the tuned configuration no longer trains: {result.status}: {result.error}")
    notes = []
    growth = format_percent(used / before - 1, tolerance, 1, signed=True) if used and before else ""
    allowed = f"tolerance {format_setting(tolerance)}"
    if used and before and used > before * (1 + tolerance):
        reasons.append(f"peak grew from {before} bytes ({format_bytes(before)}) at tuning to {used} bytes "
                       f"({format_bytes(used)}), {growth} > {allowed}")
    elif used and before:
        notes.append(f"peak {format_bytes(used)} against {format_bytes(before)} at tuning ({growth}; "
                     f"{allowed}), limit {format_bytes(budget.limit)}")
    return _verdict("fail" if reasons else "pass", result, reasons, notes, tuned_peak_bytes=before,
                    limit_bytes=int(budget.limit))
