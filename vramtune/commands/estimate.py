"""`vramtune estimate SPEC --card SIZE`: the per-rank peak of every strategy on a card you do not have, from the
counted state and CPU probes of a depth-reduced copy (vramtune/estimating/); for a model folder, its config.json or
a PaddleFormers config, from the sizes alone (nothing built, no probe)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer

from vramtune.commands import common
from vramtune.core.records import ProbeResult
from vramtune.core.units import SizeError, parse_size
from vramtune.dialects.kits import KITS
from vramtune.dialects.kits import export as kit_export
from vramtune.estimating.answer import answer
from vramtune.estimating.asking import question
from vramtune.estimating.factors import gpu_probes
from vramtune.estimating.spec_estimate import estimate
from vramtune.memory.held import notes as held_notes
from vramtune.memory.state import Row
from vramtune.probing.runner import Backend
from vramtune.probing.store import StoreError
from vramtune.render import output
from vramtune.render.answer import render_answer
from vramtune.render.estimate import render_estimate
from vramtune.spec import Problem, Spec, SpecError


def _size(flag: str, value: str, path: Path) -> int:
    try:
        return parse_size(value)
    except SizeError as error:
        raise SpecError([Problem(str(path), flag, str(error))]) from None


def _calibration(path: Path) -> list[ProbeResult]:
    from vramtune.core.report import Report
    from vramtune.dialects.yaml_file import read_yaml

    try:
        return gpu_probes(Report.from_json(read_yaml(path)))
    except (KeyError, TypeError, ValueError) as error:
        raise StoreError(f"--calibrate {path}: {error}") from None


def _kit_options(spec: Spec, best: Row) -> list[str] | None:
    """A kit config's predicted best as the kit's own overrides, said (None: not a kit config)."""
    if spec.source not in kit_export.SOURCES:
        return None
    options, warnings = kit_export.estimate_options(spec, best.strategy)
    kit = KITS[spec.source]
    output.say(f"as the kit's overrides (the evaluation batch is not estimated):{kit.command_options(options)}")
    for warning in warnings:
        output.warn(warning)
    return options


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command("estimate")
    @common.exits_cleanly
    def estimate_command(
        spec_path: Path = common.SpecArg, trailing: Optional[List[str]] = common.TrailingArg,
        card: str = typer.Option(..., "--card", help="the GPU's memory, e.g. 24GiB or 80GB", show_default=False),
        budget: Optional[str] = typer.Option(None, "--budget", help="the memory a run may use (default: the card)"),
        devices: Optional[int] = typer.Option(None, "--devices", min=1, help="data-parallel ranks (default: the "
                                              "spec's; any number, beyond this machine's devices); for a model "
                                              "folder, config.json or PaddleFormers config also every hybrid-parallel "
                                              "layout of them"),
        calibration: Optional[Path] = typer.Option(None, "--calibrate", help="a `probe --json` report from a GPU: "
                                                   "its probes calibrate the AMP and allocator factors"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", min=1, help="a model folder or config.json: the "
                                              "sequence length (default 4096; a PaddleFormers config: max_seq_len)"),
        batch: Optional[int] = typer.Option(None, "--batch", min=1, help="a model folder or config.json: samples per "
                                            "step and device (default 8; a PaddleFormers config: "
                                            "per_device_train_batch_size x gradient_accumulation_steps)"),
        nodes: Optional[int] = typer.Option(None, "--nodes", min=1, help="a model folder, config.json or "
                                            "PaddleFormers config: the nodes the devices are on (tensor parallel "
                                            "within one; default 1)"),
        json_output: bool = common.JsonOpt,
        kit_options: Optional[List[str]] = common.KitOpt,
    ) -> None:
        """Estimate every strategy's per-rank peak on a card, without the card (CPU probes, counted state; for a
        model folder, a config.json or a PaddleFormers config: counted from the sizes, no probe)."""
        options = common.config_options(kit_options, trailing)
        card_bytes = _size("--card", card, spec_path)
        budget_bytes = _size("--budget", budget, spec_path) if budget else None
        probes = _calibration(calibration) if calibration is not None else None
        asked = question(spec_path, seq_len, batch, devices, options)
        if asked is not None:
            if nodes and asked.devices % nodes:
                raise SpecError([Problem(str(spec_path), "--nodes", f"{nodes} nodes do not divide {asked.devices} "
                                                                     "devices")])
            asked = replace(asked, nodes=nodes or 1)
            result = answer(asked, card_bytes, calibration=probes, budget_bytes=budget_bytes)
            render_answer(result)
            if json_output:
                output.emit_json(result.to_json())
            raise typer.Exit(common.EXIT_OK if result.fits else common.EXIT_NO_FIT)
        for flag, value in (("--seq-len", seq_len), ("--batch", batch), ("--nodes", nodes)):
            if value is not None:
                raise SpecError([Problem(str(spec_path), flag, "applies to a model folder, a config.json or a "
                                                              "PaddleFormers config: a spec's sequence length and "
                                                              "target batch are its own (edit them in the file)")])
        spec = common.load(spec_path, {"kit.options": options, **({"devices": devices} if devices else {})}, backend)
        result = estimate(spec, backend, card_bytes, budget_bytes, devices, output.say, calibration=probes)
        result.notes += held_notes(result.counts)
        render_estimate(result)
        kit = _kit_options(spec, result.best) if result.best else None
        if json_output:
            output.emit_json({**result.to_json(), **({"kit_options": kit} if kit is not None else {})})
        raise typer.Exit(common.EXIT_OK if result.best else common.EXIT_NO_FIT)
