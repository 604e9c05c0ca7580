"""The command line: parse, call, render. Exit codes: 0 ok, 1 nothing fits / check failed, 2 bad input."""
from __future__ import annotations

import functools
import signal
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from vramtune import __version__, checking, export, report, runner, tuning
from vramtune.search import BuildFailure
from vramtune.spec import Problem, SpecError, load_spec
from vramtune.store import StoreError
from vramtune.strategy import Strategy

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find the cheapest PaddlePaddle training configuration that fits your memory budget.")

EXIT_OK, EXIT_NO_FIT, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

SpecArg = typer.Argument(..., help="model spec (YAML)", show_default=False)
JsonOpt = typer.Option(False, "--json", help="machine-readable result on stdout (human output on stderr)")
BudgetOpt = typer.Option(None, "--budget", help="memory budget, e.g. 512MiB or 15.5GiB (overrides the spec)")
DeviceOpt = typer.Option(None, "--device", help="auto | cpu | gpu | gpu:N (overrides the spec)")
TargetOpt = typer.Option(None, "--target-batch", help="effective batch size (overrides the spec)")


def exits_cleanly(command: Callable) -> Callable:
    """Turn the errors users cause into one readable message each and exit code 2, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SpecError as error:
            for problem in error.problems:
                report.error(str(problem))
        except (runner.DeviceError, StoreError, BuildFailure, export.ExportError) as error:
            report.error(str(error))
        except KeyboardInterrupt:
            report.error("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(EXIT_BAD_INPUT)

    return wrapper


def _overrides(budget: str | None, device: str | None, target_batch: int | None, **more: Any) -> dict[str, Any]:
    """Command-line overrides as dotted spec keys; a budget of digits only is bytes, as in the spec."""
    values = {"budget": int(budget) if budget is not None and budget.isdigit() else budget, "device": device,
              "train.target_batch": target_batch}
    values.update(more)
    return values


def _sigterm_as_interrupt() -> None:
    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _tune(session: tuning.Session, fresh: bool) -> dict[str, Any]:
    """Tune under the spec's lock with live progress (Ctrl-C or SIGTERM: partial report), then show it."""
    _sigterm_as_interrupt()
    progress = report.ProbeProgress(session.budget_bytes, session.spec.headroom)
    with session.store.locked(on_wait=report.console.print):
        result = tuning.tune(session, progress, fresh=fresh)
    report.render_tuning(result)
    return result


@app.command()
@exits_cleanly
def probe(
    spec_path: Path = SpecArg,
    json_output: bool = JsonOpt,
    budget: Optional[str] = BudgetOpt,
    device: Optional[str] = DeviceOpt,
    target_batch: Optional[int] = TargetOpt,
    precision: Optional[List[str]] = typer.Option(None, "--precision", help="AMP modes allowed (fp16, bf16; "
                                                  "fp32 alone means no AMP); repeat the option for several"),
    max_accumulation: Optional[int] = typer.Option(None, "--max-accumulation", help="largest accumulation tried"),
    no_recompute: bool = typer.Option(False, "--no-recompute", help="never recompute blocks"),
    fresh: bool = typer.Option(False, "--fresh", help="ignore saved results and probe again"),
) -> None:
    """Tune: run the probe ladder and print the cheapest configuration that fits."""
    precisions = None if precision is None else [p for p in precision if p != "fp32"]
    spec = load_spec(spec_path, _overrides(
        budget, device, target_batch, **{"search.precisions": precisions,
                                                         "search.max_accumulation": max_accumulation,
                                                         "search.recompute": "off" if no_recompute else None}))
    session = tuning.open_session(spec, warn=report.error)
    report.console.print(f"tuning {spec.name} on {session.device['name']} for target batch "
                         f"{spec.train.target_batch} within {report.format_bytes(session.budget_bytes)}")
    result = _tune(session, fresh)
    if json_output:
        report.emit_json(result)
    if result["interrupted"]:
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(EXIT_OK if result["chosen"] else EXIT_NO_FIT)


@app.command()
@exits_cleanly
def measure(
    spec_path: Path = SpecArg,
    micro_batch: int = typer.Option(..., "--micro-batch", "-m", help="samples per forward/backward"),
    accumulation: Optional[int] = typer.Option(None, "--accumulation", "-k",
                                               help="micro-batches per optimizer step (default: target / micro)"),
    recompute: int = typer.Option(0, "--recompute", "-r", help="number of repeated blocks to recompute"),
    precision: str = typer.Option("fp32", "--precision", "-p", help="fp32 | fp16 | bf16"),
    json_output: bool = JsonOpt,
    budget: Optional[str] = BudgetOpt,
    device: Optional[str] = DeviceOpt,
) -> None:
    """Run one isolated probe of one strategy and print its measurements."""
    spec = load_spec(spec_path, _overrides(budget, device, None))
    problems = []
    if micro_batch <= 0:
        problems.append(Problem(str(spec_path), "--micro-batch", f"must be positive, got {micro_batch}"))
    if accumulation is None:
        if micro_batch > 0 and spec.train.target_batch % micro_batch:
            problems.append(Problem(str(spec_path), "--micro-batch", (
                f"{micro_batch} does not divide train.target_batch {spec.train.target_batch}; "
                "give --accumulation explicitly")))
        accumulation = max(1, spec.train.target_batch // max(micro_batch, 1))
    elif accumulation <= 0:
        problems.append(Problem(str(spec_path), "--accumulation", f"must be positive, got {accumulation}"))
    if recompute < 0:
        problems.append(Problem(str(spec_path), "--recompute", f"must be 0 or more, got {recompute}"))
    if precision not in ("fp32", "fp16", "bf16"):
        problems.append(Problem(str(spec_path), "--precision", f"must be fp32, fp16 or bf16, got {precision!r}"))
    if problems:
        raise SpecError(problems)
    session = tuning.open_session(spec, warn=report.error)
    result = runner.measure(spec, Strategy(precision, micro_batch, accumulation, recompute), session.device,
                            session.budget_bytes)
    if result.get("error_kind") == "build":
        raise BuildFailure(result["error"])
    report.render_measure(result)
    if json_output:
        report.emit_json(result)


@app.command()
@exits_cleanly
def apply(
    spec_path: Path = SpecArg,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="default: SPEC.tuned.yaml (.tuned.json)"),
    format_name: str = typer.Option("yaml", "--format", help="yaml (the spec + a tuned: section) | paddlenlp "
                                    "(TrainingArguments JSON)"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing output file"),
) -> None:
    """Write the tuned configuration (from saved results; probes first if there are none)."""
    if format_name not in ("yaml", "paddlenlp"):
        raise SpecError([Problem(str(spec_path), "--format", f"must be yaml or paddlenlp, got {format_name!r}")])
    spec = load_spec(spec_path)
    out = output or export.default_output(spec_path, format_name)
    if out.exists() and not force:
        raise export.ExportError(f"{out} exists; pass --force to overwrite it")
    session = tuning.open_session(spec, warn=report.error)
    result = session.store.load_summary()
    if result is None:
        report.console.print(f"no saved results for {spec.name} on {session.device['name']}: probing first")
        result = _tune(session, fresh=False)
        if result["interrupted"]:
            raise typer.Exit(EXIT_INTERRUPTED)
    if not result["chosen"]:
        report.error(f"nothing fits {spec.name} within the budget; see `vramtune probe {spec_path}`")
        raise typer.Exit(EXIT_NO_FIT)
    text, warnings = export.render(format_name, spec_path, spec.name, spec.train.learning_rate, result)
    for warning in warnings:
        report.console.print(f"warning: {warning}", markup=False)
    export.write_atomic(out, text, force)
    report.console.print(f"wrote {out}", markup=False)


@app.command()
@exits_cleanly
def check(
    tuned_path: Path = typer.Argument(..., help="a file written by `vramtune apply`", show_default=False),
    tolerance: float = typer.Option(0.05, "--tolerance", help="allowed peak growth since tuning (0.05 = 5%)"),
    device: Optional[str] = DeviceOpt,
    json_output: bool = JsonOpt,
) -> None:
    """CI gate: re-probe the tuned configuration; exit 1 if it no longer fits or its peak grew."""
    if tolerance < 0:
        raise SpecError([Problem(str(tuned_path), "--tolerance", f"must be 0 or more, got {tolerance}")])
    spec = load_spec(tuned_path)
    verdict = checking.check(spec, tolerance, device)
    report.render_check(verdict)
    if json_output:
        report.emit_json(verdict)
    raise typer.Exit(EXIT_NO_FIT if verdict["status"] == "fail" else EXIT_OK)


@app.command()
def validate(
    spec_paths: List[Path] = typer.Argument(..., help="spec files", show_default=False),
    json_output: bool = JsonOpt,
) -> None:
    """Check specs without running Paddle; reports every problem in every file."""
    files = []
    for path in spec_paths:
        try:
            load_spec(path)
            files.append({"file": str(path), "ok": True, "problems": []})
            report.console.print(f"ok: {path}", markup=False)
        except SpecError as error:
            files.append({"file": str(path), "ok": False, "problems": [str(p) for p in error.problems]})
            for problem in error.problems:
                report.error(str(problem))
    if json_output:
        report.emit_json({"valid": all(f["ok"] for f in files), "files": files})
    raise typer.Exit(EXIT_OK if all(f["ok"] for f in files) else EXIT_BAD_INPUT)


def version_callback(value: bool) -> None:
    if value:
        print(f"vramtune {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                      help="print the version")) -> None:
    """vramtune: measured OOM auto-tuning for PaddlePaddle training."""


def main() -> None:
    app()
