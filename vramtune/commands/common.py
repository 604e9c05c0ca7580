"""What the commands share: exit codes, options, the mechanisms' flags, spec overrides and clean exits (under
--json, a failure's one JSON object on stdout too)."""
from __future__ import annotations

import enum
import functools
import inspect
import os
import shlex
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional

import click
import typer
from typer.core import TyperGroup

from vramtune import __version__
from vramtune.commands import packages
from vramtune.core import units
from vramtune.core.records import Device
from vramtune.core.strategy import FIELDS, Strategy
from vramtune.dialects.verify_with import problems as verify_with_problems
from vramtune.plugins import MECHANISMS, SOURCES
from vramtune.probing import interrupts
from vramtune.probing.runner import Backend
from vramtune.render import output
from vramtune.render.tuning import ProbeProgress, render_tuning
from vramtune.spec import Problem, Spec, SpecError, load_spec
from vramtune.tuning import session

EXIT_OK, EXIT_NO_FIT, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _complete_device(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [value for value in ("auto", "cpu", "gpu", "gpu:0", "gpu:1") if value.startswith(incomplete)]


SpecArg = typer.Argument(..., metavar="SPEC", help="your training file: a PaddleFormers config, a kit config, a "
                         "PaddleNLP arguments file (JSON) or a vramtune spec", show_default=False)
JsonOpt = typer.Option(False, "--json", help="machine-readable result on stdout (human output on stderr)")
BudgetOpt = typer.Option(None, "--budget", help="memory budget, e.g. 512MiB or 15.5GiB (MB, GB: powers of 10) "
                         "(overrides the spec)")
DeviceOpt = typer.Option(None, "--device", metavar="[auto|cpu|gpu|gpu:N]", shell_complete=_complete_device,
                         help="device (overrides the spec)")
TargetOpt = typer.Option(None, "--target-batch", help="effective batch size (overrides the spec)")
TrailingArg = typer.Argument(None, metavar="KEY=VALUE", show_default=False,
                             help="the config's own overrides after the file, as paddleformers-cli train takes them "
                                  "(the same as -O KEY=VALUE)")
KitOpt = typer.Option(None, "--option", "-O", metavar="KEY=VALUE", help="a kit or PaddleFormers config's own "
                      "override (a kit's -o, e.g. -O Global.epochs=1); repeat for several")
VerifyWithOpt = typer.Option(None, "--verify-with", metavar="COMMAND",
                             help="the command that trains the tuned file, {file} standing for it (your own loop "
                                  "for a vramtune spec, your Trainer script for a PaddleNLP arguments file, e.g. "
                                  "\"python run_finetune.py {file}\"; stopped after 3 optimizer steps); PaddleFormers' "
                                  "and the kits' files are verified by their own tool without it")
NoVerifyOpt = typer.Option(False, "--no-verify", help="write the answer without training it once with the file's own "
                           "tool first")
TimeoutOpt = typer.Option(None, "--probe-timeout", metavar="SECONDS", min=1.0, help="seconds a probe may run "
                          "before it is stopped (the spec's probe.timeout; default 300): a large model on a busy CPU "
                          "may need more")
VerboseOpt = typer.Option(False, "--verbose", "-v", help="also where each probe's time went (import, build, "
                          "prepare, shape check, warmup, measured steps, after)")


def _option_type(kind: type, choices: tuple[str, ...] | None = None) -> Any:
    if choices:
        return enum.Enum(f"{kind.__name__}Choice", {c: c for c in choices}, type=str)
    return kind


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def plain(value: Any) -> Any:
    """Enum choices back to their strings (also inside lists)."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value.value if isinstance(value, enum.Enum) else value


def mechanism_flags(kind: str) -> Callable[[Callable], Callable]:
    """Add the registered mechanisms' flags to a command: strategy fields (measure) or search options (probe).
    The command receives them in `**flags`."""
    if kind == "fields":
        params = [_parameter(f.name, Optional[_option_type(f.type, f.choices)],
                             typer.Option(None, f.flag, f.short, help=f.help)) for f in FIELDS.values()]
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
            overrides.update(option.overrides(plain(flags.get(option.param))))
    return overrides


def overrides(budget: str | None, device: str | None, target_batch: int | None = None,
              kit_options: list[str] | None = None, probe_timeout: float | None = None) -> dict[str, Any]:
    """Command-line overrides as dotted spec keys; a budget of digits only is bytes, refused under 1 MiB."""
    return {"budget": budget, "device": device, "train.target_batch": target_batch, "kit.options": kit_options,
            "probe.timeout": probe_timeout}


def config_options(kit_options: list[str] | None, trailing: list[str] | None) -> list[str]:
    """A config's own overrides: the -O ones, then those after the file. A size's unit alone after the file is a
    flag's value split by a space (`--budget 4 MiB`), named as such rather than as a malformed override."""
    for item in trailing or []:
        if units.is_unit(item):
            raise Failed(f"{item!r} after the file is a unit on its own: write a size without a space (e.g. --budget "
                         f"512{item.strip()}, not --budget 512 {item.strip()})", EXIT_BAD_INPUT)
    return [*(kit_options or []), *(trailing or [])]


def probe_command(spec_path: Path, budget: str | None, device: str | None, target_batch: int | None,
                  options: list[str]) -> str:
    """The `vramtune probe` command that tunes what a command was given (its budget, device, batch and a config's
    overrides), for a message that sends the user there."""
    flags = [*(["--budget", budget] if budget else []), *(["--device", device] if device else []),
             *(["--target-batch", str(target_batch)] if target_batch else []), *options]
    return shlex.join(["vramtune", "probe", str(spec_path), *flags])


def load(spec_path: Path, changes: dict[str, Any] | None = None, backend: Backend | None = None) -> Spec:
    """The spec with command-line overrides; what the user should know about the file is said once. `backend`: the
    command probes through it, so the packages that build the model must be importable there (checked first)."""
    spec = load_spec(spec_path, changes)
    if backend is not None:
        refusal = SOURCES[spec.source].refusal(spec.model, str(spec_path))
        if refusal:
            raise SpecError([Problem(str(spec_path), "stage", refusal)])
        packages.require(spec, backend)
    for warning in spec.warnings:
        output.warn(warning)
    return spec


# the key a file states its tensor-parallel degree with, by model source (a vramtune spec's own: tensor_parallel)
LAYOUT_KEYS = {"paddleformers": "tensor_model_parallel_size"}


def load_tuning_spec(spec_path: Path, budget: str | None, device: str | None, target_batch: int | None,
                     flags: dict[str, Any], kit_options: list[str], backend: Backend,
                     probe_timeout: float | None = None) -> Spec:
    """The spec with the overrides `probe` and `apply` share: budget, device, target batch, search flags, a config's
    own overrides, the probe timeout; checked for the packages the backend's probes need."""
    return load(spec_path, {**overrides(budget, device, target_batch, kit_options, probe_timeout),
                            **search_overrides(flags)}, backend)


def refuse_layout(spec: Spec, strategy: Strategy, device: Device, flag: bool = False) -> None:
    """A tensor-parallel layout this device or Paddle cannot run (the mechanism says why): exit 2, by the file's key
    (`flag`: by --tensor-parallel, which gave it)."""
    if strategy.tensor_parallel < 2:
        return
    refused = next(m for m in MECHANISMS if m.name == "tensor_parallel").unsupported(strategy, device)
    if refused:
        key = "--tensor-parallel" if flag else LAYOUT_KEYS.get(spec.source, "tensor_parallel")
        raise SpecError([Problem(spec.path, key, f"{strategy.tensor_parallel}: {refused}")])


def _save_traceback() -> str:
    handle, path = tempfile.mkstemp(prefix=f"vramtune-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(f"vramtune {__version__}\n{traceback.format_exc()}")
    return path


class Failed(Exception):
    """A command's own failure (nothing fits, an interrupted probe run): said as errors are, with its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def verify_flag_problems(verify_with: str | None, no_verify: bool) -> list[str]:
    """What is wrong with --verify-with and --no-verify together (apply's and check's)."""
    problems = [] if verify_with is None else verify_with_problems(verify_with)
    if verify_with is not None and no_verify:
        problems.append("--verify-with and --no-verify: choose one (a command to verify with, or no verification)")
    return problems


class BadFlags(Exception):
    """Every problem with a command's flags, found before it does anything."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def failure_json(message: str, exit_code: int) -> dict[str, Any]:
    """What --json prints on stdout when a command fails before its result: the message stderr says (several
    problems: one a line) and the exit code."""
    return {"error": message, "exit_code": exit_code}


def _failure(error: Exception) -> tuple[list[str], int]:
    """The messages an exception is said with, and the command's exit code."""
    if isinstance(error, SpecError):
        return [str(problem) for problem in error.problems], EXIT_BAD_INPUT
    if isinstance(error, BadFlags):
        return list(error.problems), EXIT_BAD_INPUT
    if isinstance(error, session.USER_ERRORS):
        return [str(error)], EXIT_BAD_INPUT
    if isinstance(error, Failed):
        return [str(error)], error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return ["interrupted"], EXIT_INTERRUPTED
    return [f"internal error: {type(error).__name__}: {error} (traceback in {_save_traceback()}; please report "
             "it)"], EXIT_INTERNAL


def exits_cleanly(command: Callable) -> Callable:
    """Errors users cause: one readable message each, exit 2. A command's own failure: its message and code.
    Interrupts: 130. Our own bugs: one line naming the file that holds the traceback, exit 3. Under --json, stdout
    gets the failure's JSON object (failure_json) too."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.TyperException, click.exceptions.ClickException, click.exceptions.Exit):
            raise
        except (Exception, KeyboardInterrupt) as error:
            messages, code = _failure(error)
        for message in messages:
            output.error(message)
        if kwargs.get("json_output"):  # an interrupt's real code is its signal's (interrupts.run exits with it)
            output.emit_json(failure_json("\n".join(messages), interrupts.exit_code() if code == EXIT_INTERRUPTED
                                          else code))
        raise typer.Exit(code)

    return wrapper


class JsonUsageErrors(TyperGroup):
    """The command line's own usage errors (an unknown option, a value of the wrong type: exit 2) also as a JSON
    object on stdout, where the command given takes --json and was given it."""

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta["json_output"] = "--json" in rest and command is not None and any(
            "--json" in parameter.opts for parameter in command.params)
        return name, command, rest

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as error:  # typer's own click: a usage error is one of exit code 2
            if ctx.meta.get("json_output") and error.exit_code == EXIT_BAD_INPUT:
                output.emit_json(failure_json(error.format_message(), error.exit_code))
            raise


def tune_and_show(spec_session: session.Session, fresh: bool = False, verbose: bool = False) -> session.Report:
    """Tune with live progress, then render the report."""
    progress = ProbeProgress(verbose)
    try:
        result = session.tune(spec_session, progress, on_wait=output.say, fresh=fresh)
    finally:
        progress.close()
    render_tuning(result)
    return result
