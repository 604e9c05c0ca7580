"""The command line: parse, call the session, render, exit. Exit codes: 0 ok, 1 nothing fits / check failed /
the probe does not fit, 2 bad input, 3 internal error (traceback saved to a file), 130 interrupted."""
from __future__ import annotations

import enum
import functools
import importlib.util
import inspect
import os
import signal
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional

import click
import typer

from vramtune import __version__, chart, checking, export, render, session
from vramtune.mechanisms import MECHANISMS, strategy_fields
from vramtune.runner import Backend, ChildBackend
from vramtune.spec import Problem, SpecError, load_spec

EXIT_OK, EXIT_NO_FIT, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

Format = enum.Enum("Format", {name: name for name in export.FORMATS}, type=str)


def _complete_device(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [value for value in ("auto", "cpu", "gpu", "gpu:0", "gpu:1") if value.startswith(incomplete)]


SpecArg = typer.Argument(..., help="a spec (YAML) or a PaddleNLP arguments file (JSON)", show_default=False)
JsonOpt = typer.Option(False, "--json", help="machine-readable result on stdout (human output on stderr)")
BudgetOpt = typer.Option(None, "--budget", help="memory budget, e.g. 512MiB or 15.5GiB (overrides the spec)")
DeviceOpt = typer.Option(None, "--device", metavar="[auto|cpu|gpu|gpu:N]", shell_complete=_complete_device,
                         help="device (overrides the spec)")
TargetOpt = typer.Option(None, "--target-batch", help="effective batch size (overrides the spec)")


def _option_type(kind: type, choices: tuple[str, ...] | None = None) -> Any:
    if choices:
        return enum.Enum(f"{kind.__name__}Choice", {c: c for c in choices}, type=str)
    return kind


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _plain(value: Any) -> Any:
    """Enum choices back to their strings (also inside lists)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.value if isinstance(value, enum.Enum) else value


def mechanism_flags(kind: str) -> Callable[[Callable], Callable]:
    """Add the registered mechanisms' flags to a command: strategy fields (measure) or search options (probe).
    The command receives them in `**flags`."""
    if kind == "fields":
        params = [_parameter(f.name, Optional[_option_type(f.type, f.choices)],
                             typer.Option(None, f.flag, f.short, help=f.help)) for f in strategy_fields()]
    else:
        params = [_parameter(o.param, Optional[List[_option_type(o.type, o.choices)]] if o.multiple else
                             (o.type if o.type is bool else Optional[o.type]),
                             typer.Option(o.default, o.flag, help=o.help)) for m in MECHANISMS for o in m.options]

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        command.__signature__ = signature.replace(parameters=own + params)
        return command
    return decorate


def search_overrides(flags: dict[str, Any]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for mechanism in MECHANISMS:
        for option in mechanism.options:
            overrides.update(option.overrides(_plain(flags.get(option.param))))
    return overrides


def overrides(budget: str | None, device: str | None, target_batch: int | None = None) -> dict[str, Any]:
    """Command-line overrides as dotted spec keys; a budget of digits only is bytes, as in the spec."""
    return {"budget": int(budget) if budget is not None and budget.isdigit() else budget, "device": device,
            "train.target_batch": target_batch}


def _save_traceback() -> str:
    handle, path = tempfile.mkstemp(prefix=f"vramtune-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(f"vramtune {__version__}\n{traceback.format_exc()}")
    return path


def exits_cleanly(command: Callable) -> Callable:
    """Errors users cause: one readable message each, exit 2. Interrupts: 130. Our own bugs: one line naming
    the file that holds the traceback, exit 3."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, click.exceptions.ClickException, click.exceptions.Exit):
            raise
        except SpecError as error:
            for problem in error.problems:
                render.error(str(problem))
        except session.USER_ERRORS as error:
            render.error(str(error))
        except KeyboardInterrupt:
            render.error("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as error:
            render.error(f"internal error: {type(error).__name__}: {error} (traceback in {_save_traceback()}; "
                         "please report it)")
            raise typer.Exit(EXIT_INTERNAL) from None
        raise typer.Exit(EXIT_BAD_INPUT)

    return wrapper


def make_app(backend: Backend) -> typer.Typer:
    """The CLI over a measuring backend (real children, or fake devices in tests)."""
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Find the fastest PaddlePaddle training configuration that fits your memory budget.")

    def tune_and_show(spec_session: session.Session, fresh: bool = False) -> dict[str, Any]:
        progress = render.ProbeProgress()
        try:
            result = session.tune(spec_session, progress, on_wait=render.say, fresh=fresh)
        finally:
            progress.close()
        render.render_tuning(result)
        return result

    @app.command()
    @exits_cleanly
    @mechanism_flags("options")
    def probe(spec_path: Path = SpecArg, json_output: bool = JsonOpt, budget: Optional[str] = BudgetOpt,
              device: Optional[str] = DeviceOpt, target_batch: Optional[int] = TargetOpt,
              fresh: bool = typer.Option(False, "--fresh", help="ignore saved results and probe again"),
              **flags: Any) -> None:
        """Tune: run the probe ladder and print the fastest configuration that fits."""
        spec = load_spec(spec_path, {**overrides(budget, device, target_batch), **search_overrides(flags)})
        spec_session = session.open_session(spec, backend, warn=render.warn)
        render.say(f"tuning {spec.name} on {spec_session.device.name} for target batch "
                   f"{spec.train.target_batch} within {render.format_bytes(spec_session.budget.bytes)}")
        result = tune_and_show(spec_session, fresh)
        if json_output:
            render.emit_json(result)
        elif not result["interrupted"]:
            print(render.choice_line(result), flush=True)
        if result["interrupted"]:
            raise typer.Exit(EXIT_INTERRUPTED)
        raise typer.Exit(EXIT_OK if result["chosen"] else EXIT_NO_FIT)

    @app.command()
    @exits_cleanly
    @mechanism_flags("fields")
    def measure(spec_path: Path = SpecArg, json_output: bool = JsonOpt, budget: Optional[str] = BudgetOpt,
                device: Optional[str] = DeviceOpt, **flags: Any) -> None:
        """Run one isolated probe of one strategy and print its measurements (exit 1 if it does not fit)."""
        spec = load_spec(spec_path, overrides(budget, device))
        if flags.get("micro_batch") is None:
            raise SpecError([Problem(str(spec_path), "--micro-batch", "is required")])
        strategy = session.strategy_from_flags(spec, {k: _plain(v) for k, v in flags.items()})
        spec_session = session.open_session(spec, backend, warn=render.warn)
        result = session.measure_checked(spec_session, strategy, on_wait=render.say).to_json()
        render.render_measure(result)
        if json_output:
            render.emit_json(result)
        raise typer.Exit(EXIT_OK if result["status"] in ("fits", "unsupported") else EXIT_NO_FIT)

    @app.command()
    @exits_cleanly
    @mechanism_flags("options")
    def apply(
        spec_path: Path = SpecArg,
        output: Optional[str] = typer.Option(None, "--output", "-o",
                                             help="default: SPEC.tuned.yaml (.tuned.json); - for stdout"),
        format_name: Optional[Format] = typer.Option(None, "--format", help="yaml: the spec + a tuned: section; "
                                                     "paddlenlp: TrainingArguments JSON; arguments: the PaddleNLP "
                                                     "arguments file given, tuned (default: yaml, or arguments "
                                                     "for a .json spec)", show_default=False),
        force: bool = typer.Option(False, "--force", help="overwrite an existing output file"),
        json_output: bool = JsonOpt,
        budget: Optional[str] = BudgetOpt,
        device: Optional[str] = DeviceOpt,
        target_batch: Optional[int] = TargetOpt,
        **flags: Any,
    ) -> None:
        """Write the tuned configuration (from saved results; probes first if there are none)."""
        name = _plain(format_name) or export.default_format(spec_path)
        spec = load_spec(spec_path, {**overrides(budget, device, target_batch), **search_overrides(flags)})
        export.check_format(name, spec_path, spec)
        out = None if output == "-" else Path(output) if output else export.default_output(spec_path, name)
        if out is not None and out.exists() and not force:
            raise export.ExportError(f"{out} exists; pass --force to overwrite it")
        spec_session = session.open_session(spec, backend, warn=render.warn)
        result = spec_session.store.load_summary()
        if result is None:
            render.say(f"no saved results for {spec.name} on {spec_session.device.name}: probing first")
            result = tune_and_show(spec_session)
            if result["interrupted"]:
                raise typer.Exit(EXIT_INTERRUPTED)
        if not result["chosen"]:
            render.error(f"nothing fits {spec.name} within the budget; see `vramtune probe {spec_path}`")
            raise typer.Exit(EXIT_NO_FIT)
        text, warnings = export.render(name, spec_path, spec, result)
        for warning in warnings:
            render.warn(warning)
        if out is None:
            print(text, end="", flush=True)
        else:
            export.write(out, text, force)
            render.say(f"wrote {out}")
        if json_output:
            render.emit_json({"output": str(out) if out else "-", "format": name, "warnings": warnings,
                              "chosen": result["chosen"]})

    @app.command()
    @exits_cleanly
    def check(
        tuned_path: Path = typer.Argument(..., help="a file written by `vramtune apply`", show_default=False),
        tolerance: float = typer.Option(0.05, "--tolerance", help="allowed peak growth since tuning (0.05 = 5%)"),
        device: Optional[str] = DeviceOpt,
        strict: bool = typer.Option(False, "--strict", help="exit 1 when the tuned device is not here, instead of "
                                    "a CPU smoke probe"),
        devices: Optional[int] = typer.Option(None, "--devices", min=1, help="re-measure on N ranks instead of the "
                                              "tuned ones (each rank's micro-batch and accumulation kept)"),
        json_output: bool = JsonOpt,
    ) -> None:
        """CI gate: re-probe the tuned configuration; exit 1 if it no longer fits, no longer trains or its peak
        grew."""
        if tolerance < 0:
            raise SpecError([Problem(str(tuned_path), "--tolerance", f"must be 0 or more, got {tolerance}")])
        spec = load_spec(tuned_path)
        verdict = checking.check(spec, tolerance, backend, render.say, device, strict, devices)
        render.render_check(verdict)
        if json_output:
            render.emit_json(verdict)
        raise typer.Exit(EXIT_NO_FIT if verdict["status"] == "fail" else EXIT_OK)

    @app.command()
    @exits_cleanly
    def plot(spec_path: Path = SpecArg,
             output: Path = typer.Option(Path("memory.png"), "--output", "-o", help="the PNG to write"),
             budget: Optional[str] = BudgetOpt, device: Optional[str] = DeviceOpt,
             target_batch: Optional[int] = TargetOpt) -> None:
        """Draw the saved probes: peak memory against micro-batch, the budget line, the choice (a PNG)."""
        if importlib.util.find_spec("matplotlib") is None:
            raise export.ExportError("vramtune plot needs matplotlib: pip install 'vramtune[plot]'")
        spec = load_spec(spec_path, overrides(budget, device, target_batch))
        result = session.open_session(spec, backend, warn=render.warn).store.load_summary()
        if result is None:
            raise export.ExportError(f"no saved results for {spec.name}: run `vramtune probe {spec_path}` first")
        try:
            chart.plot_png(result, output)
        except OSError as error:
            raise export.ExportError(f"cannot write {output}: {error.strerror or error}") from error
        render.say(f"wrote {output}")

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
                render.say(f"ok: {path}")
            except SpecError as error:
                files.append({"file": str(path), "ok": False, "problems": [str(p) for p in error.problems]})
                for problem in error.problems:
                    render.error(str(problem))
        if json_output:
            render.emit_json({"valid": all(f["ok"] for f in files), "files": files})
        raise typer.Exit(EXIT_OK if all(f["ok"] for f in files) else EXIT_BAD_INPUT)

    def version_callback(value: bool) -> None:
        if value:
            print(f"vramtune {__version__}")
            raise typer.Exit()

    @app.callback()
    def root(version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                          help="print the version")) -> None:
        """vramtune: measured OOM auto-tuning for PaddlePaddle training."""

    return app


app = make_app(ChildBackend())


def main() -> None:
    """The console script: SIGTERM ends a run like Ctrl-C (the running probe is stopped, results are kept)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    app()
