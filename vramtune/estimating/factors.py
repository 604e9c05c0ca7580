"""The factors the CPU cannot show (AMP's activations, the GPU allocator's reserve), calibrated from a GPU run's
probes."""
from __future__ import annotations

import statistics

from vramtune.core.records import ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import level_of
from vramtune.memory import held
from vramtune.memory.state import ActivationFit, Counts, Factors, Given, own_parts, state
from vramtune.plugins import MECHANISMS


def gpu_probes(report: Report) -> list[ProbeResult]:
    """The measured GPU probes of a `probe --json` report, which calibrate the factors."""
    gpu = [p for p in report.probes if p.measured and p.device and p.device.get("kind") == "gpu"]
    if not gpu:
        raise ValueError("the report has no measured GPU probe to calibrate from")
    return gpu


def calibrated(gpu: list[ProbeResult], counts: Counts, fit: ActivationFit) -> Factors:
    """Factors from a GPU run's probes: each AMP level's activations over this fit's fp32 activations at the same
    micro-batch (single-rank probes without recompute, where activations rather than a transient set the peak; what a
    kit's loop holds beside the state, held.py, out of both), and the allocator's reserve over the allocated peak
    (every probe); medians."""
    ratios: dict[str, list[float]] = {"O0": [], "O1": [], "O2": []}
    reserve = []
    for probe in gpu:
        s = probe.strategy
        if probe.reserved_bytes:
            reserve.append(probe.reserved_bytes / probe.peak_bytes - 1)
        fp32 = fit.activations(counts.layers, s.micro_batch, 0) - held.probed(counts)
        if s.recomputed_blocks or s.devices > 1 or fp32 <= fit.floor or probe.state_bytes is None:
            continue
        weights = state(MECHANISMS, counts, s, Given())["weights"]
        kept = held.held(counts, weights)  # a kit's EMA, at the probe's precision
        measured = probe.peak_bytes - probe.state_bytes - own_parts(MECHANISMS, counts, s) - kept
        ratios[level_of(s.precision)].append(measured / fp32)
    stated = Factors()
    return Factors(o1_activations=statistics.median(ratios["O1"]) if ratios["O1"] else stated.o1_activations,
                   o2_activations=statistics.median(ratios["O2"]) if ratios["O2"] else stated.o2_activations,
                   fragmentation=statistics.median(reserve) if reserve else stated.fragmentation,
                   source=f"calibrated from {len(gpu)} GPU probes")
