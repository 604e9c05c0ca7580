"""`vramtune apply SPEC`: write the tuned configuration (from saved results; probes first if there are none)."""
from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any, List, Optional

import typer

from vramtune import export
from vramtune.commands import common
from vramtune.core.records import ProbeResult, timed_out_unmeasured
from vramtune.core.report import Report
from vramtune.core.strategy import Strategy
from vramtune.core.verification import Verified
from vramtune.export import expressible
from vramtune.plugins import MECHANISMS
from vramtune.probing.runner import Backend
from vramtune.render.output import emit_json, say, warn
from vramtune.tuning import session
from vramtune.verifying.answer import verifier, verify

Format = enum.Enum("Format", {name: name for name in export.FORMATS}, type=str)


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    @common.mechanism_flags("options")
    def apply(
        spec_path: Path = common.SpecArg, trailing: Optional[List[str]] = common.TrailingArg,
        output: Optional[str] = typer.Option(None, "--output", "-o",
                                             help="default: SPEC.tuned.yaml (.tuned.json); - for stdout (not "
                                                  "with --json)"),
        format_name: Optional[Format] = typer.Option(None, "--format", help="yaml: the spec + a tuned: section; "
                                                     "paddlenlp: TrainingArguments JSON; arguments: the PaddleNLP "
                                                     "arguments file given, tuned; kit, paddleformers: the kit's or "
                                                     "PaddleFormers config given, tuned (default: the file's own)",
                                                     show_default=False),
        force: bool = typer.Option(False, "--force", help="overwrite an existing output file"),
        json_output: bool = common.JsonOpt,
        budget: Optional[str] = common.BudgetOpt,
        device: Optional[str] = common.DeviceOpt,
        target_batch: Optional[int] = common.TargetOpt,
        kit_options: Optional[List[str]] = common.KitOpt,
        verify_with: Optional[str] = common.VerifyWithOpt,
        no_verify: bool = common.NoVerifyOpt,
        probe_timeout: Optional[float] = common.TimeoutOpt,
        **flags: Any,
    ) -> None:
        """Write the tuned configuration (from saved results; probes first if there are none), once the file's own
        tool has trained it (its peak shown beside the probe's)."""
        problems = common.verify_flag_problems(verify_with, no_verify)
        if output == "-" and json_output:
            problems.append("-o - and --json both write to stdout: write the file with -o FILE (the JSON report names "
                            "it), or leave out --json to get the file alone on stdout")
        if problems:
            raise common.BadFlags(problems)
        name = common.plain(format_name) or export.default_format(spec_path)
        options = common.config_options(kit_options, trailing)
        spec = common.load_tuning_spec(spec_path, budget, device, target_batch, flags, options, backend,
                                       probe_timeout)
        export.check_format(name, spec_path, spec)
        out = None if output == "-" else Path(output) if output else export.default_output(spec_path, name)
        if out is not None and out.exists() and not force:
            raise export.ExportError(f"{out} exists; pass --force to overwrite it")
        export.check_output(name, spec_path, spec, out)
        spec_session = session.open_session(spec, backend, warn=warn)
        common.refuse_layout(spec, Strategy(**session.fixed_layout(spec)), spec_session.device)
        result = spec_session.store.load_summary()
        if result is None:
            say(f"no saved results for {spec.name} on {spec_session.device.name}: probing first")
            result = common.tune_and_show(spec_session)
            if result.interrupted:
                raise common.Failed("interrupted before anything was written: the finished probes are saved; run "
                                    "again to resume", common.EXIT_INTERRUPTED)
        if not result.chosen and timed_out_unmeasured(result.probes):
            raise common.Failed(f"nothing measured for {spec.name}: the probes timed out before any measured a "
                                f"peak; raise --probe-timeout (now {spec.probe.timeout:g}s)", common.EXIT_NO_FIT)
        if not result.chosen:
            raise common.Failed(f"nothing fits {spec.name} within the budget; see "
                                f"`{common.probe_command(spec_path, budget, device, target_batch, options)}`",
                                common.EXIT_NO_FIT)
        result, preferred = export.prefer(name, spec, result)  # a format's own choice among the fitting results
        faithful = expressible.faithful_format(export.FORMATS[export.default_format(spec_path)])
        exported = exported_result(spec_session, result, name, faithful)
        note = exported.note(result.chosen, name, faithful)
        runs = []
        if not no_verify:
            anchor = out or export.default_output(spec_path, name)  # where the file's relative paths resolve
            exported, runs = verified(spec_session, result, exported, name, anchor, verify_with)
        text, warnings = export.render(name, spec_path, spec, dataclasses.replace(result, chosen=exported.result), out)
        warnings = preferred + ([note] if note else []) + warnings
        for warning in warnings:
            warn(warning)
        if out is None:  # -o - (never with --json)
            print(text, end="", flush=True)
            return
        export.write(out, text, force)
        say(f"wrote {out}")
        if json_output:
            emit_json({"output": str(out), "format": name, "warnings": warnings,
                       "chosen": result.chosen.to_json(), "exported": exported.result.to_json(),
                       "exported_instead_because": exported.why, "verification": [run.to_json() for run in runs]})


def exported_result(spec_session: session.Session, report: Report, format_name: str,
                    faithful: str) -> expressible.Exported:
    """The chosen result, or the nearest measured one the format can say (measuring one more if none fits)."""
    phases = [m.judge for m in MECHANISMS]
    saved = [result.judged(spec_session.budget, phases) for result in spec_session.store.load().values()]

    def measure(strategy: Strategy) -> ProbeResult:
        say(f"measuring {strategy.label()}: the nearest configuration --format {format_name} can say")
        result = session.measure(spec_session, strategy, say)
        spec_session.store.save(result)
        return result

    assert report.chosen is not None
    floor = expressible.micro_batch_floor(spec_session.spec.settings, report.chosen)
    try:
        return expressible.exported(report.chosen, [*report.probes, *saved], export.FORMATS[format_name], floor,
                                    measure)
    except expressible.NothingExpressible as error:
        raise common.Failed(f"--format {format_name}: {error} (for the chosen one: {faithful})",
                            common.EXIT_NO_FIT) from None


def verified(spec_session: session.Session, report: Report, exported: expressible.Exported, format_name: str,
             output: Path, command: str | None) -> tuple[expressible.Exported, list[Verified]]:
    """The exported result once the file's own tool (or the user's command) trained it (issue 36), or the one chosen
    again with the tool's difference folded in; every run said."""
    spec, budget = spec_session.spec, spec_session.budget
    tool_run = verifier(spec.dialect, format_name, command)
    if isinstance(tool_run, str):
        say(f"not verified by the file's own tool: {tool_run}")
        return exported, []
    phases = [m.judge for m in MECHANISMS]
    saved = [result.judged(budget, phases) for result in spec_session.store.load().values()]
    written = export.FORMATS[format_name]
    measured = [probe for probe in [*report.probes, *saved] if not expressible.inexpressible(probe, written)]

    def render(result: ProbeResult, path: Path) -> str:
        return export.render(format_name, Path(spec.path), spec, dataclasses.replace(report, chosen=result), path)[0]

    floor = expressible.micro_batch_floor(spec.settings, exported.result)
    answer = verify(tool_run, spec, exported.result, measured, render, output, spec_session.backend,
                    spec_session.device, budget, MECHANISMS, floor, command, say)
    if answer.result is None:
        last = answer.runs[-1]
        raise common.Failed(f"no configuration verified to fit {spec.name} within the budget: {last.tool} ran over it "
                            f"(see above) and no other measured one fits with its difference folded in; nothing was "
                            "written (--no-verify writes the probes' answer unverified)", common.EXIT_NO_FIT)
    chosen = exported if answer.result is exported.result else expressible.Exported(answer.result)
    return chosen, answer.runs

