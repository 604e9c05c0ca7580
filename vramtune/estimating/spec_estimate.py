"""`vramtune estimate SPEC`: the answer before the card. The full model's parameters are counted without allocating
them; activations are measured on CPU probes of a depth-reduced copy (the same width, sequence length and vocabulary
where a layer fits this machine, narrower otherwise) and extrapolated in depth and micro-batch; what the CPU cannot
show comes from stated factors (or factors calibrated from a GPU run's probes). Every probe runs through the same
backend as `vramtune probe` (isolated children). They measure memory only, so they run side by side (each its own
process and peak), and a large vocabulary is probed at a sixteenth: the logits' bytes per vocabulary entry, measured
between two reduced vocabularies, scale the activations back (linear to the byte on Llama's shapes)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from vramtune.core.records import Budget, ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.doctor.calibration import doctor_factors
from vramtune.estimating.activation_points import probe_activations
from vramtune.estimating.factors import calibrated
from vramtune.estimating.prober import (
    DEPTHS,
    PROBE_BUDGET,
    RECOMPUTE_DEPTHS,
    SIDE_BY_SIDE,
    Prober,
    Say,
    layer_key,
    probe_spec,
    probe_vocab,
    twin,
    width_scale,
)
from vramtune.estimating.rows import predicted_best
from vramtune.estimating.spec_rows import SpecContext, sequence_notes, spec_notes, spec_rows
from vramtune.memory.state import ActivationFit, Counts, Factors, Row
from vramtune.plugins import MECHANISMS, SOURCES
from vramtune.probing.store import device_lock_path, file_lock
from vramtune.search.choice import micro_batch_floor
from vramtune.spec import Spec
from vramtune.tuning.session import job_for


@dataclass
class Estimate:
    spec: str
    card_bytes: int
    budget: Budget
    devices: int
    counts: Counts
    fit: ActivationFit
    factors: Factors
    rows: list[Row]
    depth_probed: str  # "1 and 2 of 32 layers", or "full depth"
    width_scale: float
    seconds: float
    probes: int
    notes: list[str] = field(default_factory=list)
    buffer_ratio: float = 0.0  # data parallel's buffers over the gradients, measured at 2 ranks (devices > 1)
    probe_log: list[dict[str, Any]] = field(default_factory=list)  # each probe: what, when, its phases' seconds
    least_micro_batch: int = 1  # the floor `vramtune probe` keeps (a BatchNorm model's): no best below it
    sequence_fits: list[dict[str, Any]] = field(default_factory=list)  # probes extrapolated from shorter sequences

    @property
    def best(self) -> Row | None:
        return predicted_best(r for r in self.rows if r.strategy.micro_batch >= self.least_micro_batch)

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {"spec": self.spec, "card_bytes": self.card_bytes, "budget_bytes": self.budget.bytes,
                "limit_bytes": int(self.budget.limit), "devices": self.devices, "counts": vars(self.counts),
                "activation_fit": vars(self.fit), "factors": vars(self.factors), "depth_probed": self.depth_probed,
                "width_scale": self.width_scale, "rows": [r.to_json() for r in self.rows],
                "best": best.to_json() if best else None, "seconds": round(self.seconds, 2), "probes": self.probes,
                "buffer_ratio": self.buffer_ratio, "notes": self.notes, "probe_log": self.probe_log,
                "least_micro_batch": self.least_micro_batch, "sequence_fits": self.sequence_fits}


def estimate(spec: Spec, backend: Any, card_bytes: int, budget_bytes: int | None, devices: int | None,
             say: Say, factors: Factors | None = None, calibration: list[ProbeResult] | None = None) -> Estimate:
    """Count, probe, fit, and predict every strategy's per-rank peak on the card, with the given factors, or with
    factors calibrated from a GPU run's probes (gpu_probes()) against this fit, or the stated ones."""
    start = time.monotonic()
    devices = devices or spec.devices
    cpu = backend.describe("cpu")
    backends = [backend] + [twin(backend, spec.source) for _ in range(SIDE_BY_SIDE - 1)]
    probe_budget = Budget(PROBE_BUDGET, 0.0)
    counts = Counts(**backend.count(job_for(spec, Strategy(), cpu, probe_budget), spec.probe.timeout))
    reduced = bool(layer_key(counts.shape) and counts.layers > max(RECOMPUTE_DEPTHS))
    steps = spec.probe.steps if SOURCES[spec.source].shapes_per_step else 1  # the spec's where shapes take turns
    scale = 1.0
    if reduced:
        one = probe_spec(spec, steps, 1, 1.0, counts.shape)
        scale = width_scale(counts, Counts(**backend.count(job_for(one, Strategy(), cpu, probe_budget),
                                                           spec.probe.timeout)))
    depths, recompute_depths = (DEPTHS, RECOMPUTE_DEPTHS) if reduced else ((None,), (None,))
    probed = f"depth {', '.join(map(str, sorted({*DEPTHS, *RECOMPUTE_DEPTHS})))} of {counts.layers}" if reduced \
        else "full depth"
    vocab = probe_vocab(spec, counts.shape)
    prober = Prober(spec, steps, backends, cpu, scale, counts.shape, vocab, say, [m.judge for m in MECHANISMS])
    say(f"estimating {spec.name}: {counts.params:,} parameters ({counts.trainable:,} trained) counted without "
        f"allocating them; activations from CPU probes at {probed}" + (f", width x{scale:g}" if scale < 1 else "")
        + (f", sequence {', '.join(map(str, sorted(prober.sequences)))} of {prober.seq_len}" if prober.sequences
           else ""))
    try:
        with file_lock(device_lock_path(cpu), say, f"probing on {cpu.name}"):
            plain, recomputed, floor, logits = probe_activations(prober, depths, recompute_depths, counts,
                                                                 spec.settings["recompute"].enabled)
            ratio = prober.buffer_ratio(depths[-1], plain[-1][1]) if devices > 1 else 0.0
    finally:
        prober.close()
    if not reduced and recomputed:
        counts.layers = recomputed[0][0]
    fit = ActivationFit.fit(plain, recomputed, scale, floor)
    factors = factors or (calibrated(calibration, counts, fit) if calibration
                          else doctor_factors(card_bytes, cpu.paddle_version) or Factors())
    budget = Budget(budget_bytes or card_bytes, spec.headroom)
    context = SpecContext(devices, counts, fit, ratio, bool(recomputed))
    rows = spec_rows(spec, factors, budget, context)
    notes = spec_notes(spec, factors, scale, context)
    least, why = micro_batch_floor(MECHANISMS, spec.settings, next(iter(prober.results.values())).facts)
    least = min(least, spec.micro_batches()[0])  # a target below the floor is its own micro-batch
    if least > 1:
        notes.append(f"no micro-batch below {least} is chosen, as `vramtune probe` chooses none: {why}")
    notes += sequence_notes(prober)
    if vocab:
        notes.append(f"the probes' vocabulary was {vocab:,} of {counts.shape['vocab_size']:,} entries: the logits, "
                     f"{logits / max(1, getattr(spec.model, 'seq_len', 1)):.2f} bytes per token and vocabulary entry "
                     f"(measured at {vocab:,} and {2 * vocab:,}), scale the activations back")
    return Estimate(spec.name, card_bytes, budget, devices, counts, fit, factors, rows, probed, scale,
                    time.monotonic() - start, prober.count, notes, buffer_ratio=ratio, probe_log=prober.log,
                    least_micro_batch=least, sequence_fits=prober.fits)
