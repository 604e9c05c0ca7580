"""Where the budget line falls: peak memory against micro-batch, one series per rung's setting (precision,
recompute, ranks), as a compact terminal chart and as a PNG (`vramtune plot`, matplotlib optional)."""
from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from vramtune.core.records import ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes, format_setting

WIDTH = 48  # characters for the largest of the peaks and the limit


def series_label(strategy: Strategy) -> str:
    """The strategy less its micro-batch and accumulation: what one line of the chart holds fixed."""
    return strategy.label(without=("accumulation",))


def series(probes: list[ProbeResult]) -> dict[str, list[ProbeResult]]:
    """Probes with a measured peak, by series, each sorted by micro-batch."""
    grouped: dict[str, list[ProbeResult]] = {}
    for result in probes:
        if result.used_bytes:
            grouped.setdefault(series_label(result.strategy), []).append(result)
    return {name: sorted(results, key=lambda r: r.strategy.micro_batch) for name, results in grouped.items()}


def text_chart(probes: list[ProbeResult], limit: float, chosen: ProbeResult | None,
               width: int = WIDTH) -> list[str]:
    """Rich-markup lines: a bar per probe (`width` characters for the largest), `|` where the limit falls (a bar over
    the limit goes past it, one within never does), the chosen probe starred."""
    grouped = series(probes)
    if not grouped:
        return []
    top = max([limit, *(r.used_bytes for results in grouped.values() for r in results)])
    at_limit = round(width * limit / top)
    chosen_strategy = chosen.strategy if chosen else None
    lines = [f"memory against the limit {format_bytes(limit)} (|):"]
    for name, results in grouped.items():
        for result in results:
            length = round(width * result.used_bytes / top)
            if result.used_bytes > limit:  # past the `|` however little it is over (rounding would reach it only)
                length = max(length, at_limit + 2)
            cells = ["█" if i < length else " " for i in range(max(width, at_limit + 1, length))]
            cells[at_limit] = "|"
            style = "green" if result.status == "fits" else "red"
            mark = " *" if result.strategy == chosen_strategy else ""
            lines.append(f"  {escape(name):<16} m={result.strategy.micro_batch:<5} [{style}]{''.join(cells)}[/] "
                         f"{format_bytes(result.used_bytes)}{mark}")
    return lines


def plot_png(report: Report, output: Path) -> None:
    """The same picture as a PNG for a pull request: a line per series, the limit and the budget, the choice."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mib = 2**20
    figure, axes = plt.subplots(figsize=(8, 4.8), dpi=120)
    for name, results in series(report.probes).items():
        sizes = [r.strategy.micro_batch for r in results]
        axes.plot(sizes, [r.used_bytes / mib for r in results], marker="o", label=name)
        over = [r for r in results if r.status != "fits"]
        axes.scatter([r.strategy.micro_batch for r in over], [r.used_bytes / mib for r in over], s=80,
                     facecolors="none", edgecolors="red", zorder=3)
    axes.axhline(report.limit / mib, color="red", linestyle="--",
                 label=f"limit {format_bytes(report.limit)} (budget less {format_setting(report.budget.headroom)})")
    axes.axhline(report.budget.bytes / mib, color="grey", linestyle=":", label="budget")
    chosen = report.chosen
    if chosen:
        axes.scatter([chosen.strategy.micro_batch], [chosen.used_bytes / mib], marker="*", s=300, color="gold",
                     edgecolors="black", zorder=4,
                     label=f"chosen: {chosen.strategy.label()}, {chosen.samples_per_sec:.1f} samples/s")
    axes.set_xscale("log", base=2)
    sizes = sorted({result.strategy.micro_batch for result in report.probes})
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.minorticks_off()
    axes.set_xlabel("micro-batch (samples per forward/backward)")
    axes.set_ylabel("peak memory (MiB)")
    axes.set_title(f"{report.spec} on {report.device_name}: target batch {report.target_batch}", fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(output)
    plt.close(figure)
