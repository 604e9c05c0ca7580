"""`vramtune plot SPEC`: the saved probes as a PNG (peak against micro-batch, the limit, the choice)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import List, Optional

import typer

from vramtune import export
from vramtune.commands import common
from vramtune.core.units import format_bytes
from vramtune.probing.runner import Backend
from vramtune.render import chart
from vramtune.render.output import say, warn
from vramtune.tuning import session


def register(app: typer.Typer, backend: Backend) -> None:
    @app.command()
    @common.exits_cleanly
    def plot(spec_path: Path = common.SpecArg, trailing: Optional[List[str]] = common.TrailingArg,
             output: Path = typer.Option(Path("memory.png"), "--output", "-o", help="the PNG to write"),
             budget: Optional[str] = common.BudgetOpt, device: Optional[str] = common.DeviceOpt,
             target_batch: Optional[int] = common.TargetOpt,
             kit_options: Optional[List[str]] = common.KitOpt) -> None:
        """Draw the saved probes: peak memory against micro-batch, the budget line, the choice (a PNG)."""
        if str(output) == "-":
            raise export.ExportError("-o -: plot writes a PNG file, not to stdout; name the file (default memory.png)")
        output = output if output.suffix else output.with_suffix(".png")  # matplotlib adds it: say the file written
        if importlib.util.find_spec("matplotlib") is None:
            raise export.ExportError("vramtune plot needs matplotlib: pip install 'vramtune[plot]'")
        options = common.config_options(kit_options, trailing)
        spec = common.load(spec_path, common.overrides(budget, device, target_batch, options))
        spec_session = session.open_session(spec, backend, warn=warn)
        result = spec_session.store.load_summary()
        if result is None:
            raise export.ExportError(f"no saved results for {spec.name} within "
                                     f"{format_bytes(spec_session.budget.bytes)} on {spec_session.device.name}: "
                                     f"run `{common.probe_command(spec_path, budget, device, target_batch, options)}` "
                                     "first")
        try:
            chart.plot_png(result, output)
        except OSError as error:
            raise export.ExportError(f"cannot write {output}: {error.strerror or error}") from error
        say(f"wrote {output}")
