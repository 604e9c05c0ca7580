"""The answer verified by the user's own tool before it is written (issue 36).

The search runs on vramtune's mirror of each tool's training step; the configuration `apply` is about to write is then
trained once, bounded, by the tool itself (the file's dialect says how: `Dialect.verify`; or the user's own command,
`--verify-with`), its peak read from the
counters the probes read. Where the tool's peak does not fit, the choice is made again with the measured difference
folded in (each other fitting probe's peak times the tool's ratio to the probe) and verified again; the report says
each step. Where the tool cannot run here, it says why and what was verified instead (nothing)."""
from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vramtune.core.records import Budget, Device, ProbeResult
from vramtune.core.spec import Spec
from vramtune.core.units import format_bytes
from vramtune.core.verification import ToolRun, Verified, VerifyRequest
from vramtune.dialects.verify_with import any_format
from vramtune.mechanisms.base import Mechanism
from vramtune.mechanisms.evaluation.kept import largest_fitting, probe_evaluation
from vramtune.plugins import DIALECTS
from vramtune.probing.runner import Backend
from vramtune.search.choice import choose

ATTEMPTS = 3  # verification runs at most: the choice, and two made again with the difference folded in
TIMEOUT = 900.0  # seconds for one bounded run of the tool (its start-up, data, a few steps)

Render = Callable[[ProbeResult, Path], str]  # the tuned file's text for a result, naming where it is written
Say = Callable[[str], None]
ToolRunFor = Callable[[VerifyRequest], ToolRun | str]  # the bounded run of the tool for a request, or why there is none


@dataclass
class Answer:
    """What verification settled: the result to write (None: none verified to fit) and every run, in order."""

    result: ProbeResult | None
    runs: list[Verified] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return bool(self.runs) and self.runs[-1].status == "fits"


def verify(tool_run: ToolRunFor, spec: Spec, chosen: ProbeResult, measured: Iterable[ProbeResult], render: Render,
           output: Path, backend: Backend, device: Device, budget: Budget, mechanisms: Sequence[Mechanism],
           floor: int, command: str | None, say: Say) -> Answer:
    """Verify `chosen` by the tool `tool_run` runs on the file `render` writes for it; where the tool's peak is over
    the limit (its training's or its evaluation's), choose again among the `measured` results with the ratio of the
    phase that was over folded in, and verify that one."""
    answer, candidate, ratios = Answer(chosen), chosen, Ratios()
    tried: set = set()
    with tempfile.TemporaryDirectory(prefix="vramtune-verify-") as scratch:
        while candidate is not None and len(answer.runs) < ATTEMPTS:
            tried.add(_key(candidate))
            run = _verify_one(tool_run, VerifyRequest(spec, output, candidate.strategy, device, Path(scratch), command),
                              candidate, render, backend, budget, say)
            answer.runs.append(run)
            answer.result = candidate
            say(words(run, budget))
            for note in run.notes:
                say(f"  {note}")
            if run.status != "over_budget" or not ratios.fold(run, budget):
                return answer
            candidate = choose(mechanisms, _folded(measured, tried, ratios, budget), floor)
            if candidate is not None:
                say(f"choosing again with {ratios.words()} folded in: {candidate.label()} "
                    f"({_with_it(candidate, ratios)})")
    answer.result = None if answer.runs[-1].status == "over_budget" else answer.result
    return answer


@dataclass
class Ratios:
    """The tool's peak over the probe's, per phase, folded into the choice made again: a phase's once it was over."""

    training: float = 1.0
    evaluation: float = 1.0

    def fold(self, run: Verified, budget: Budget) -> bool:
        """Fold in the ratio of each phase of `run` that was over the limit; whether any was (with a ratio)."""
        over = False
        if run.ratio and not budget.fits(run.peak_bytes):
            self.training, over = max(self.training, run.ratio), True
        if run.eval_ratio and not budget.fits(run.eval_peak_bytes):
            self.evaluation, over = max(self.evaluation, run.eval_ratio), True
        if not over and run.ratio and run.eval_peak_bytes is None:  # out of memory, no phase read over: training's
            self.training, over = max(self.training, run.ratio), True
        return over

    def words(self) -> str:
        parts = ([f"+{self.training - 1:.1%}"] if self.training > 1 else []) + (
            [f"evaluation's +{self.evaluation - 1:.1%}"] if self.evaluation > 1 else [])
        return "the tool's " + (" and ".join(parts) or f"+{self.training - 1:.1%}")


def _key(result: ProbeResult) -> tuple:
    """A candidate as verified: its strategy and its evaluation batch."""
    return result.strategy, result.facts.get("eval_batch")


def _with_it(result: ProbeResult, ratios: Ratios) -> str:
    said = []
    if ratios.training > 1 or ratios.evaluation == 1:
        said.append(f"{format_bytes(result.used_bytes or 0)} measured, {format_bytes(_times(result, ratios.training))} "
                    "with it")
    if ratios.evaluation > 1:
        batch = result.facts.get("eval_batch")
        probe = probe_evaluation(result.facts, batch)
        said.append(f"evaluation at batch {batch}: " + (
            f"{format_bytes(probe)} measured, {format_bytes(int(probe * ratios.evaluation))} with it" if probe else
            "not measured, predicted to fit with it by a line through the probes' evaluation peaks"))
        if batch != result.facts.get("eval_requested"):
            said[-1] += f", lowered from {result.facts.get('eval_requested')}"
    return "; ".join(said)


def _verify_one(tool_run: ToolRunFor, request: VerifyRequest, candidate: ProbeResult, render: Render, backend: Backend,
                budget: Budget, say: Say) -> Verified:
    """One bounded run of the tool on the candidate's file, written beside the output (`request.tuned_file`: where
    its relative paths resolve as the output's will) under a hidden name, and removed after."""
    output = request.tuned_file
    tuned = output.with_name(f".{output.stem}.verifying{output.suffix}")
    request = dataclasses.replace(request, tuned_file=tuned)
    try:
        try:
            tuned.write_text(render(candidate, tuned), encoding="utf-8")
        except OSError as error:
            return Verified("the file's own tool", "failed", probe_bytes=candidate.used_bytes,
                            error=f"cannot write {tuned}: {error.strerror or error}")
        run = tool_run(request)
        if isinstance(run, str):
            return Verified("the file's own tool", "skipped", probe_bytes=candidate.used_bytes, error=run)
        say(f"verifying {candidate.label()} with {run.tool}")
        verified = backend.verify(run, candidate.strategy, request.device, budget, TIMEOUT)
        return dataclasses.replace(verified, probe_bytes=candidate.used_bytes,
                                   probe_eval_bytes=probe_evaluation(candidate.facts, verified.eval_batch))
    finally:
        tuned.unlink(missing_ok=True)


def _times(result: ProbeResult, ratio: float) -> int:
    return int((result.used_bytes or 0) * ratio)


def _folded(measured: Iterable[ProbeResult], tried: set, ratios: Ratios, budget: Budget) -> list[ProbeResult]:
    """The fitting results not verified yet whose peak, times the tool's training ratio, still fits; where they
    evaluate and the tool's evaluation was over, at the largest evaluation batch whose peak, times the tool's
    evaluation ratio, fits (measured, or predicted by the probes' line: kept.largest_fitting)."""
    folded = []
    for result in measured:
        if not result.fits or not budget.fits(_times(result, ratios.training)):
            continue
        if "eval_requested" in result.facts and ratios.evaluation > 1:
            batch = largest_fitting(result.facts, budget.limit, ratios.evaluation, result.state_bytes)
            if batch is None:
                continue
            result = dataclasses.replace(result, facts={**result.facts, "eval_batch": batch})
        if _key(result) not in tried:
            folded.append(result)
    return folded


def words(run: Verified, budget: Budget) -> str:
    """One run in a line: "verified by PaddleFormers' workflow: 69.7 MiB (probe 62.1 MiB, +12.2%) of 152.0 MiB:
    fits"; where the run evaluated, each phase beside the probe's: "...: training 69.7 MiB (probe 62.1 MiB, +12.2%),
    evaluation 70.1 MiB at batch 8 (probe 69.0 MiB, +1.6%) of 152.0 MiB: fits"."""
    if run.status == "skipped":
        return f"not verified by the file's own tool: {run.error}"
    if run.status == "failed":
        return f"verification by {run.tool} failed: {run.error}"
    peak = _beside(run.peak_bytes, run.probe_bytes, run.ratio)
    verdict = "fits" if run.status == "fits" else "over the limit"
    if run.eval_peak_bytes is not None:
        peak = f"training {peak}, evaluation {_beside_at(run)}"
        if run.status == "over_budget":
            over = [phase for phase, used in (("training", run.peak_bytes), ("evaluation", run.eval_peak_bytes))
                    if not budget.fits(used)]
            verdict += f" ({' and '.join(over)})" if over else ""
    return f"verified by {run.tool}: {peak} of {format_bytes(budget.limit)}: {verdict} ({run.seconds:.1f}s)"


def _beside_at(run: Verified) -> str:
    """The evaluation's peak at its batch, beside the probe's: "70.1 MiB at batch 8 (probe 69.0 MiB, +1.6%)"."""
    at = f"{format_bytes(run.eval_peak_bytes)} at batch {run.eval_batch}"
    return at + (f" (probe {format_bytes(run.probe_eval_bytes)}, {run.eval_ratio - 1:+.1%})"
                 if run.eval_ratio and run.probe_eval_bytes else "")


def _beside(used: int | None, probe: int | None, ratio: float | None) -> str:
    against = f" (probe {format_bytes(probe)}, {ratio - 1:+.1%})" if ratio and probe else ""
    return (format_bytes(used) if used else "out of memory") + against


def verifier(dialect_name: str, format_name: str | None, command: str | None) -> ToolRunFor | str:
    """What trains a file written in `format_name` (None: the file's own) for a `dialect_name` file: the dialect's
    own tool for its own format, the user's command otherwise; why nothing does, where nothing can."""
    dialect = next(dialect for dialect in DIALECTS if dialect.name == dialect_name)
    own = format_name in (None, dialect.format.name)
    if own and dialect.verify is not None:
        return dialect.verify
    if command:
        return any_format
    if not own:
        return (f"--format {format_name} is not the file's own (--format {dialect.format.name} is): name the command "
                "that trains it to verify it, --verify-with \"... {file}\"")
    return (f"vramtune cannot run {dialect.name} files' own tool yet: name the command that trains the tuned file "
            "to verify it, --verify-with \"... {file}\"")
