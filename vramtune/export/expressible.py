"""Which measured configuration a format exports: the chosen one where the user's parser can say it, else the
fastest measured one it can say (from the search's saved probes; one more probe when none of them fits), so that
the exported file never trains something other than what was measured."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vramtune.core.records import ProbeResult
from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.dialects.base import Format
from vramtune.plugins import MECHANISMS
from vramtune.search.choice import choose
from vramtune.search.choice import micro_batch_floor as floor_of

Measure = Callable[[Strategy], ProbeResult]


class NothingExpressible(Exception):
    """No measured configuration that fits can be said in the format."""


@dataclass
class Exported:
    result: ProbeResult
    why: str | None = None  # why the chosen configuration was not exported (None: it was)

    def note(self, chosen: ProbeResult, format_name: str, faithful: str) -> str | None:
        """What was exported instead of the chosen configuration, and why; `faithful`: how to get the chosen one."""
        if self.why is None:
            return None
        return (f"exported {self.result.label()} ({self.result.samples_per_sec:.1f} samples/s) instead of the "
                f"chosen {chosen.label()} ({chosen.samples_per_sec:.1f} samples/s): {self.why}; it is the fastest "
                f"measured configuration that --format {format_name} can say and that fits (for the chosen one: "
                f"{faithful})")


def faithful_format(own: Format) -> str:
    """Where the chosen configuration can always be said: the spec's own format, and what trains it."""
    return f"--format {own.name}, {own.trained_by}" if own.trained_by else f"--format {own.name}"


def inexpressible(result: ProbeResult, written: Format) -> str | None:
    """Why the file the format writes cannot train the result's configuration as measured (its dialect's codec
    says; a format without `inexpressible` says everything), or None."""
    if written.inexpressible is None:
        return None
    return written.inexpressible(Tuned(strategy=result.strategy, facts=result.facts))


def micro_batch_floor(settings: dict, chosen: ProbeResult) -> int:
    """The smallest micro-batch the search would choose (a mechanism's floor, e.g. a BatchNorm model's)."""
    return floor_of(MECHANISMS, settings, chosen.facts)[0]


def exported(chosen: ProbeResult, probes: Iterable[ProbeResult], written: Format, floor: int,
             measure: Measure) -> Exported:
    """The chosen result if the format can say it; else the fastest fitting measured one it can say; else the
    chosen one's expressible neighbour (e.g. every layer recomputed), measured now. Raises NothingExpressible."""
    why = inexpressible(chosen, written)
    if why is None:
        return Exported(chosen)
    best = choose(MECHANISMS, [p for p in probes if p.fits and not inexpressible(p, written)], floor)
    if best is None and written.expressible_neighbour is not None:
        neighbour = written.expressible_neighbour(Tuned(strategy=chosen.strategy, facts=chosen.facts))
        known = {p.strategy: p for p in probes}
        result = None if neighbour is None else known.get(neighbour) or measure(neighbour)
        best = result if result is not None and result.fits and not inexpressible(result, written) else None
    if best is None:
        raise NothingExpressible(f"{why}, and no measured configuration that the format can say fits the budget")
    return Exported(best, why)
