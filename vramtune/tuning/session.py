"""The tuning session: a spec bound to a device, a budget, its saved results and a measuring backend.

It owns what the CLI must not: locking, saved-result reuse, flag validation, turning build failures into user
errors, and the report. The backend is pluggable (`runner.ChildBackend` for real probes, fake devices in tests),
so every command's behaviour can be exercised without Paddle.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vramtune.core.records import Budget, Device, ProbeJob, ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import FIELDS, Strategy
from vramtune.core.units import format_bytes
from vramtune.dialects.roundtrip import RoundTripError
from vramtune.doctor.gate import DoctorFailed, require_doctor
from vramtune.export import ExportError
from vramtune.memory.counted import counted_state, given_for
from vramtune.memory.prior import model_prior
from vramtune.plugins import MECHANISMS, SOURCES
from vramtune.probing import interrupts
from vramtune.probing.runner import Backend, DeviceError
from vramtune.probing.store import ResultStore, StoreError, devices_locked, spec_key
from vramtune.search import BuildFailure, Outcome, Progress, SearchProblem, Tuner
from vramtune.spec import Problem, Spec, SpecError

Say = Callable[[str], None]


USER_ERRORS = (SpecError, DeviceError, StoreError, BuildFailure, ExportError, DoctorFailed,  # exit code 2
               RoundTripError)


@dataclass
class Session:
    spec: Spec
    device: Device
    budget: Budget
    store: ResultStore
    backend: Backend
    shapes_checked: bool = False  # a probe of this spec measured: its data fit its model, the next skip the check
    budget_note: str | None = None  # what budget auto was resolved to, in words (GPU)
    doctor_checked: bool = False  # the checks GPU measurements depend on passed (vramtune/doctor/gate.py)
    ranks_checked: bool = False  # and those a probe of several ranks depends on


NO_BUDGET = 1 << 62  # `measure` on a CPU given no budget: nothing is over it, the result is not judged


def resolve_budget(spec: Spec, device: Device, required: bool = True) -> int:
    """The spec's budget, or for `auto` what the GPU has free for this run (its total memory where Paddle cannot say;
    GPU only: a CPU budget is virtual; where none is `required`, to measure without a verdict, NO_BUDGET)."""
    if spec.budget is not None:
        return spec.budget
    if device.kind == "cpu" and not required:
        return NO_BUDGET
    if device.kind == "cpu":
        raise SpecError([Problem(spec.path, "budget", "is required on cpu (a size like 512MiB, or --budget): the "
                                                      "CPU budget is virtual; 'auto' means a GPU's memory")])
    return device.total_bytes if device.free_bytes is None else device.free_bytes


def auto_budget_words(device: Device) -> str | None:
    """What budget auto came to on a GPU shared with other processes, in words (None: the whole card)."""
    if device.free_bytes is None:
        return None
    in_use = device.total_bytes - device.free_bytes
    by = f", by processes {', '.join(map(str, device.holders))}" if device.holders else ""
    return (f"budget auto: {format_bytes(device.free_bytes)}, what {device.name} has free now "
            f"({format_bytes(device.total_bytes)} card; {format_bytes(in_use)} in use{by})")


def open_session(spec: Spec, backend: Backend, warn: Say, device: Device | None = None,
                 budget_bytes: int | None = None, budget_required: bool = True) -> Session:
    device = device or backend.describe(spec.device)
    budget = Budget(budget_bytes or resolve_budget(spec, device, budget_required), spec.headroom)
    note = auto_budget_words(device) if not budget_bytes and spec.budget is None else None
    identity = SOURCES[spec.source].identity(spec.model, spec.base_dir)
    return Session(spec, device, budget, ResultStore(spec_key(spec.raw, device, identity), warn=warn), backend,
                   budget_note=note)


def job_for(spec: Spec, strategy: Strategy, device: Device, budget: Budget) -> ProbeJob:
    settings = {m.name: child for m in MECHANISMS
                if (child := m.child_settings(spec.settings.get(m.name), budget)) is not None}
    return ProbeJob(source=spec.source, model=SOURCES[spec.source].to_json(spec.model), spec_path=spec.path,
                    spec_dir=str(Path(spec.path).resolve().parent),
                    optimizer=spec.train.optimizer, learning_rate=spec.train.learning_rate,
                    strategy=strategy.to_json(), device=device.to_json(), steps=spec.probe.steps,
                    warmup=spec.probe.warmup, settings=settings, max_grad_norm=spec.train.max_grad_norm)


def unsupported(strategy: Strategy, device: Device, spec: Spec | None = None) -> str | None:
    """Why the device cannot run the strategy (the first mechanism that says, then the spec's model), or None."""
    reason = next((why for mechanism in MECHANISMS if (why := mechanism.unsupported(strategy, device))), None)
    return reason or (SOURCES[spec.source].unsupported(spec.model, strategy, device) if spec else None)


def measure(session: Session, strategy: Strategy, on_wait: Say) -> ProbeResult:
    """One isolated probe, judged against the budget. A strategy the device (or the model on it) cannot run is
    `unsupported`, with no probe."""
    reason = unsupported(strategy, session.device, session.spec)
    if reason:
        return ProbeResult("unsupported", strategy, error=reason, budget_bytes=session.budget.bytes,
                           device={"name": session.device.name, "kind": session.device.kind},
                           paddle_version=session.device.paddle_version)
    several = strategy.ranks > 1
    if session.device.kind == "gpu" and not (session.doctor_checked and (session.ranks_checked or not several)):
        require_doctor(session.device, session.backend, on_wait, ranks=several)
        session.doctor_checked, session.ranks_checked = True, session.ranks_checked or several
    job = job_for(session.spec, strategy, session.device, session.budget)
    job.check_sample = not session.shapes_checked
    with devices_locked(session.device, strategy.ranks, on_wait, f"probing on {session.device.name}"):
        result = session.backend.measure(job, session.spec.probe.timeout, session.budget)
    if result.status == "oom" and session.device.kind == "gpu" and result.budget_bytes is None:
        result = dataclasses.replace(result, budget_bytes=session.budget.bytes)  # what it ran out under (still_holds)
    session.shapes_checked = session.shapes_checked or result.peak_bytes is not None  # it trained
    return result.judged(session.budget, [m.judge for m in MECHANISMS])


def probe_notes(strategy: Strategy, device_kind: str) -> list[str]:
    """What a probe of the strategy runs differently on this kind of device (the mechanisms' words)."""
    return [note for mechanism in MECHANISMS for note in mechanism.probe_notes(strategy, device_kind)]


def measure_checked(session: Session, strategy: Strategy, on_wait: Say) -> ProbeResult:
    """measure(), with a model that cannot be built turned into a user error."""
    result = measure(session, strategy, on_wait)
    if result.error_kind == "build":
        raise BuildFailure(result.error)
    return result


def fixed_layout(spec: Spec) -> dict[str, Any]:
    """The tensor-parallel degree and sequence parallelism the spec fixes for every probe (the search keeps them)."""
    settings = spec.settings.get("tensor_parallel")
    return {"tensor_parallel": settings.degree, "sequence_parallel": settings.sequence} if settings else {}


def strategy_from_flags(spec: Spec, values: dict[str, Any]) -> Strategy:
    """The strategy `vramtune measure` was given; every bad flag is reported at once (exit 2)."""
    problems = []
    for field in FIELDS.values():
        value = values.get(field.name)
        message = field.check(value) if value is not None else None
        if message:
            problems.append(Problem(spec.path, field.flag, message))
    values = {"devices": spec.devices, **fixed_layout(spec), **{k: v for k, v in values.items() if v is not None}}
    micro, devices = values.get("micro_batch") or 0, values.get("devices", 1)
    per_rank = spec.train.target_batch // devices
    if values.get("accumulation") is None:
        if micro > 0 and per_rank % micro:
            problems.append(Problem(spec.path, "--micro-batch", (
                f"{micro} does not divide train.target_batch {spec.train.target_batch}"
                + (f" over {devices} devices" if devices > 1 else "") + "; give --accumulation explicitly")))
        values["accumulation"] = max(1, per_rank // max(micro, 1))
    if problems:
        raise SpecError(problems)
    return Strategy.from_json(values)


def count_model(session: Session) -> dict[str, Any] | None:
    """The model's lazy count (child/counting.py, built without memory), or None where it cannot be counted."""
    job = job_for(session.spec, Strategy(), session.device, session.budget)
    try:
        return session.backend.count(job, session.spec.probe.timeout)
    except DeviceError:
        return None


def search_problem(session: Session) -> SearchProblem:
    """What the search needs to know: the target, the candidates, the budget, the device, each mechanism's
    settings, the state counted before the first probe (counted once, when the search first asks) and the
    activations per sample predicted from the model's config.json where its source names one."""
    spec = session.spec
    shape = SOURCES[spec.source].model_shape(spec.model)
    return SearchProblem(target_batch=spec.train.target_batch, micro_batches=spec.micro_batches(),
                         budget=session.budget, device=session.device, mechanisms=MECHANISMS, settings=spec.settings,
                         speed_rises_with_batch=session.device.kind == "gpu",
                         state=counted_state(MECHANISMS, lambda: count_model(session),
                                             given_for(spec.train.optimizer, spec.settings)),
                         activations=model_prior(*shape, session.device.kind) if shape else None,
                         model_unsupported=lambda strategy: SOURCES[spec.source].unsupported(spec.model, strategy,
                                                                                            session.device),
                         accumulates=spec.settings["accumulation"].accumulates)


def report(session: Session, outcome: Outcome, seconds: float, reused: int, interrupted: bool) -> Report:
    """The result of a tuning run (also what `apply` reads back)."""
    device = session.device
    return Report(spec=session.spec.name, spec_path=session.spec.path, device_name=device.name,
                  device_kind=device.kind, device_bytes=device.total_bytes, paddle_version=device.paddle_version,
                  budget=session.budget, target_batch=session.spec.train.target_batch, chosen=outcome.chosen,
                  probes=outcome.probes, notes=[note for note in [session.budget_note] if note]
                  + SOURCES[session.spec.source].notes(session.spec.model, device.kind) + outcome.notes,
                  closest=outcome.closest,
                  suggestions=SOURCES[session.spec.source].suggestions(session.spec.model, outcome.suggestions),
                  reused=reused, interrupted=interrupted, seconds=seconds,
                  accumulates=session.spec.settings["accumulation"].accumulates)


def still_holds(result: ProbeResult, budget: Budget) -> bool:
    """Whether a saved result answers for this budget (budget auto on a shared GPU varies from run to run): a
    measured one is judged again against it, an out-of-memory holds for budgets no larger than its own."""
    return result.status != "oom" or result.budget_bytes is None or budget.bytes <= result.budget_bytes


def tune(session: Session, progress: Progress, on_wait: Say, fresh: bool = False) -> Report:
    """Run the ladder under the spec's lock; every probe is saved as soon as it finishes. Ctrl-C, SIGTERM or SIGHUP
    (vramtune/interrupts.py) returns the partial report (interrupted: true) with every probe saved so far."""
    with session.store.locked(on_wait=on_wait):
        start = time.monotonic()
        if fresh:
            session.store.clear()
        timeout = session.spec.probe.timeout  # a probe that timed out sooner than this is probed again
        saved = {strategy: result for strategy, result in session.store.load().items()
                 if result.status != "timeout" or result.seconds >= timeout}
        reused = 0
        finished: dict[Strategy, ProbeResult] = {}  # measured (and saved) by this run

        def measure_saving(strategy: Strategy) -> ProbeResult:
            nonlocal reused
            if strategy in saved and still_holds(saved[strategy], session.budget):
                reused += 1
                result = saved[strategy].judged(session.budget, [m.judge for m in MECHANISMS])
                result.reused = True
                return result
            with interrupts.until_saved():  # a signal once the probe is over is handled once it is saved and noted
                result = measure(session, strategy, on_wait)
                with interrupts.deferred():  # held where no probe answered, too (unsupported, a fake device)
                    if result.error_kind != "build":  # a build error is fixed in code the cache key may not see
                        session.store.save(result)
                    finished[strategy] = result
            return result

        tuner = Tuner(measure_saving, search_problem(session), progress)
        interrupted = False
        try:
            outcome = tuner.run()
        except KeyboardInterrupt:
            interrupted = True
            for strategy, result in finished.items():  # saved, but interrupted before the search noted it
                tuner.results.setdefault(strategy, result)
            outcome = tuner.finish()
        result = report(session, outcome, time.monotonic() - start, reused, interrupted)
        if not interrupted:
            session.store.save_summary(result)
    return result
