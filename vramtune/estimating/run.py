"""`vramtune estimate`: the answer before the card. The full model's parameters are counted without allocating them;
activations are measured on CPU probes of a depth-reduced copy (the same width, sequence length and vocabulary where
a layer fits this machine, narrower otherwise) and extrapolated in depth and micro-batch; what the CPU cannot show
comes from stated factors (or factors calibrated from a GPU run's probes). Every probe runs through the same backend
as `vramtune probe` (isolated children). They measure memory only, so they run side by side (each its own process
and peak), and a large vocabulary is probed at a sixteenth: the logits' bytes per vocabulary entry, measured between
two reduced vocabularies, scale the activations back (linear to the byte on Llama's shapes)."""
from __future__ import annotations

import copy
import itertools
import math
import queue
import statistics
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, NamedTuple

from vramtune.core.records import Budget, ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import AMP_PRECISIONS, SHARDING_STAGES, Strategy, level_of
from vramtune.doctor.calibration import doctor_factors
from vramtune.estimating.rows import predicted_best, recompute_levels
from vramtune.memory import held
from vramtune.memory.sequence import CHECK_TOLERANCE, extrapolated, line_extrapolated, probe_sequences
from vramtune.memory.state import ActivationFit, Counts, Factors, Given, Row, own_parts, row, state
from vramtune.plugins import MECHANISMS, SOURCES, micro_batch_floor
from vramtune.probing.forking import ForkServer
from vramtune.probing.runner import DeviceError
from vramtune.probing.store import device_lock_path, file_lock
from vramtune.search import BuildFailure
from vramtune.spec import Spec, apply_overrides, spec_from_dict
from vramtune.tuning.session import job_for, unsupported

PROBE_STATE_CAP = 5 << 28  # a probe's fp32 weights, gradients and AdamW state at its deepest: narrower above this
# (a ~110M Llama's 3 layers and embeddings, 1.1 GB, probe at full width; a 7B layer alone is 3.2 GB)
DEPTHS = (1, 2)  # plain activations: linear in depth from the first layer on
RECOMPUTE_DEPTHS = (2, 3)  # recompute's saving from the second on: under LoRA, recomputing the first saves nothing
GROWTH = 1.25  # activations growing less than this from m to 2m: a transient, not activations, sets the peak
MAX_MICRO_BATCH = 64
PROBE_BUDGET = 1 << 40  # CPU budgets are virtual: probes are measured, never judged here
SIDE_BY_SIDE = 2  # probes at once: each is its own process and peak; more would add memory, not answers
PROBE_TIMEOUT = 1800.0  # at least this per probe: a 7B layer at the whole sequence and a raised vocabulary takes
# 100-300 s on a busy 2-core CPU, where the spec's timeout (300 s) is meant for a GPU probe that hangs
LARGE_LOGITS = 1 << 27  # a sample's fp32 logits (sequence x vocabulary x 4 bytes) from which the vocabulary is reduced
ROUND_VOCAB = 64  # a recompute probe's raised vocabulary: a multiple of this
REBUILT_LAYERS = 2  # a recomputed step's rebuilt moment, guessed in layers' activations (checked by each probe)
VOCAB_DIVISOR = 16  # the probes' vocabulary: the model's over this (Llama-2's 32000 -> 2000, Llama-3's 128256 -> 8016)
Say = Callable[[str], None]


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


def _layer_key(shape: dict[str, Any]) -> str | None:
    return next((key for key in ("num_hidden_layers", "num_layers") if key in shape), None)


def twin(backend: Any, source: str) -> Any:
    """A second backend with a fork server of its own (one server forks one probe at a time), importing what the
    source's probes import at once, while the first counts the parameters; the backend itself without a server."""
    if not isinstance(getattr(backend, "fork_server", None), ForkServer):
        return backend
    second = copy.copy(backend)
    second.fork_server = ForkServer()
    second.preload(source)
    return second


def width_scale(counts: Counts, base: Counts) -> float:
    """The width fraction whose deepest probe keeps its weights and gradients under PROBE_STATE_CAP: 1, or halves
    while the heads (and key/value heads) stay whole. Per-layer parameters scale with its square."""
    per_layer = (counts.params - base.params) / max(1, counts.layers - 1)
    outside = base.params - per_layer
    heads = counts.shape.get("num_attention_heads", 1)
    kv_heads = counts.shape.get("num_key_value_heads") or heads
    scale = 1.0
    deepest = max(RECOMPUTE_DEPTHS)
    while 16 * (outside * scale + deepest * per_layer * scale**2) > PROBE_STATE_CAP and heads * scale / 2 >= 1 \
            and (kv_heads * scale / 2) >= 1 and (kv_heads * scale / 2).is_integer():
        scale /= 2
    return scale


def _probe_spec(spec: Spec, depth: int | None, scale: float, shape: dict[str, Any], vocab: int | None = None,
                seq: int | None = None) -> Spec:
    """The spec shrunk for a probe: depth layers (None: as it is), width x scale, a vocabulary of `vocab` entries
    (None: the model's), a sequence of `seq` tokens (None: the spec's), on CPU, one warmup and one measured step (the
    spec's steps where its steps take turns over input shapes), no evaluation."""
    steps = spec.probe.steps if SOURCES[spec.source].shapes_per_step else 1
    raw = apply_overrides(spec.raw, {"device": "cpu", "budget": PROBE_BUDGET, "headroom": 0.0, "devices": 1,
                                     "probe.steps": steps, "probe.warmup": 1, "data.seq_len": seq})
    raw.get("train", {}).pop("evaluation", None)
    overrides = dict(raw["model"].get("overrides") or {})
    key = _layer_key(shape)
    if depth is not None and key:
        overrides[key] = depth
    if scale < 1:
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"):
            if shape.get(name):
                overrides[name] = int(shape[name] * scale)
    if vocab:
        overrides["vocab_size"] = vocab
    if overrides:
        raw["model"]["overrides"] = overrides
    return spec_from_dict(raw, spec.path)


def probe_vocab(spec: Spec, shape: dict[str, Any]) -> int | None:
    """The probes' vocabulary where a sample's fp32 logits are large (None: the model's own)."""
    vocab, seq_len = shape.get("vocab_size") or 0, getattr(spec.model, "seq_len", 0) or 0
    return vocab // VOCAB_DIVISOR if 4 * seq_len * vocab >= LARGE_LOGITS else None


def _measured(result: ProbeResult) -> ProbeResult:
    if not result.measured or result.peak_bytes is None or result.state_bytes is None:
        s = result.strategy
        raise DeviceError(f"the estimate's CPU probe at micro-batch {s.micro_batch}"
                          + (f" with {s.recomputed_blocks} blocks recomputed" if s.recomputed_blocks else "")
                          + (f" on {s.devices} ranks" if s.devices > 1 else "")
                          + f" did not measure ({result.status}): {result.error or 'no figures'}")
    return result


def _activations(result: ProbeResult) -> float:
    return float(_measured(result).peak_bytes - result.state_bytes)


class _Key(NamedTuple):
    """A probe the estimate asks for, at the whole sequence or the shorter ones that stand in for it (its fields are
    the probe log's and the sequence fits' `probe`)."""

    depth: int | None  # None: the model's layers
    micro_batch: int
    recomputed: int  # blocks
    granularity: str
    devices: int
    vocab: int | None  # None: the model's


class _Prober:
    """The CPU probes of one estimate: the spec shrunk to a depth (and width, and vocabulary), SIDE_BY_SIDE at once
    (each backend with a fork server of its own: one server forks one probe at a time); probes may be asked ahead
    (`ask`), and each is said, in the order they are collected (`probe`), so the output does not depend on timing.
    Where the model's sequence is long (sequence.probe_sequences), each probe that keeps every layer's activations is
    four at shorter sequences whose activations, fitted and checked, are extrapolated to the model's (a second rung
    of four where the check misses; one at the whole sequence where that misses too)."""

    def __init__(self, spec: Spec, backends: list[Any], cpu: Any, scale: float, shape: dict[str, Any],
                 vocab: int | None, say: Say):
        """backends: SIDE_BY_SIDE of them, each with a fork server of its own (twin())."""
        self.spec, self.cpu, self.scale, self.shape, self.vocab, self.say = spec, cpu, scale, shape, vocab, say
        self.seq_len = getattr(spec.model, "seq_len", 0) or 0
        self.sequences = probe_sequences(self.seq_len)
        self.whole: list[_Key] = []  # the probes at the whole sequence: where the shorter ones' fit was not exact
        self.fits: list[dict[str, Any]] = []  # each extrapolated probe's c + a s + b s^2
        self.asked: dict[tuple[_Key, int | None], Future] = {}  # each probe at a sequence (None: the whole)
        self.log: list[dict[str, Any]] = []
        self.start = time.monotonic()
        self.results: dict[_Key, ProbeResult] = {}
        self.servers = [server for b in backends[1:] if isinstance(server := getattr(b, "fork_server", None),
                                                                       ForkServer)]
        self.backends: queue.Queue = queue.Queue()
        for backend in backends:
            self.backends.put(backend)
        self.pool = ThreadPoolExecutor(len(backends), thread_name_prefix="estimate-probe")

    @property
    def count(self) -> int:
        """The probes that ran (asked ahead and not needed, but started, too)."""
        return sum(1 for future in self.asked.values() if not future.cancelled())

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for server in self.servers:
            server.close()

    def ask(self, depth: int | None, micro: int, blocks: int = 0, granularity: str = "full", devices: int = 1,
            vocab: int | None = None) -> _Key:
        """Start a probe (once: at the shorter sequences, or the whole one); returns its key."""
        key = _Key(depth, micro, blocks, granularity, devices, vocab or self.vocab)
        for seq in self._shorter(key) or (None,):
            self._ask_at(key, seq)
        return key

    def _shorter(self, key: _Key, rung: int = 0) -> tuple[int, ...] | None:
        """The shorter sequences probe `key` runs at, at a rung (None: the whole one). With layers recomputed, only
        at a reduced vocabulary: on Paddle 2.6, whose peak counts from the process's start, the build's temporaries of
        its embedding and head (Llama-2-7B's at 26,960 entries: 113.7 MiB) set their peak up to a quarter of the
        sequence."""
        at_model_vocab = key.recomputed and (not self.vocab or key.vocab != self.vocab)  # raised, or never reduced
        return None if at_model_vocab or not self.sequences else probe_sequences(self.seq_len, rung)

    def _ask_at(self, key: _Key, seq: int | None) -> None:
        if (key, seq) in self.asked:
            return
        depth, micro, blocks, granularity, devices, vocab = key
        spec = _probe_spec(self.spec, depth, self.scale, self.shape, vocab, seq)
        strategy = Strategy(micro_batch=micro, recomputed_blocks=blocks, recompute_granularity=granularity,
                            devices=devices)
        # the data's shapes are checked once: the depth, width and vocabulary change no shape the data meets
        self.asked[(key, seq)] = self.pool.submit(self._measure, spec, strategy, not self.asked, key, seq)

    def _measure(self, spec: Spec, strategy: Strategy, check_sample: bool, key: _Key, seq: int | None
                 ) -> ProbeResult:
        budget = Budget(PROBE_BUDGET, 0.0)
        reason = unsupported(strategy, self.cpu)
        if reason:
            return ProbeResult("unsupported", strategy, error=reason, budget_bytes=budget.bytes)
        backend = self.backends.get()
        started = time.monotonic() - self.start
        try:
            job = job_for(spec, strategy, self.cpu, budget)
            job.check_sample = check_sample
            job.memory_only = strategy.devices == 1  # data parallel's buffers come with a whole step's backward
            job.until_rebuild = self.until_rebuild(key)
            result = backend.measure(job, max(spec.probe.timeout, PROBE_TIMEOUT), budget)
            result = result.judged(budget, [m.judge for m in MECHANISMS])
        finally:
            self.backends.put(backend)
        self.log.append({"probe": {**key._asdict(), "seq": seq},
                         "started": round(started, 2), "ended": round(time.monotonic() - self.start, 2),
                         "phases": result.phases, "activations": result.peak_bytes and result.state_bytes
                         and result.peak_bytes - result.state_bytes})
        return result

    def until_rebuild(self, key: _Key) -> bool:
        """Whether the probe `key` may end where backward first rebuilds a layer: one with its layers recomputed at
        a raised vocabulary below the model's, whose peak is the logits' before that moment wherever it counts
        (_recomputed_at: above the plain probe's bound, which no moment of a rebuilt layer passes)."""
        raised = self.vocab is not None and self.vocab < (key.vocab or 0) < (self.shape.get("vocab_size") or 0)
        return bool(key.recomputed) and raised

    def _result(self, key: _Key, seq: int | None) -> ProbeResult:
        result = self.asked[(key, seq)].result()
        if result.error_kind == "build":
            raise BuildFailure(result.error)
        return result

    def _collected(self, key: _Key) -> tuple[ProbeResult, str]:
        """The probe `key` at the whole sequence, and how it was found: extrapolated from the shorter sequences where
        their fit is exact, else probed."""
        rung = 0
        while self._shorter(key, rung):
            found = self._rung(key, rung)
            rung += 1
            if found:
                return found
        if rung:
            self.whole.append(key)
        self._ask_at(key, None)
        return self._result(key, None), ""

    def _rung(self, key: _Key, rung: int) -> tuple[ProbeResult, str] | None:
        """The probe `key` extrapolated from a rung's shorter sequences (a result of the longest of them with the
        extrapolated peak), and how; None where their fit misses."""
        sequences = self._shorter(key, rung) or ()
        for seq in sequences:
            self._ask_at(key, seq)
        shorter = {seq: self._result(key, seq) for seq in sequences}
        found = extrapolated({seq: _activations(result) for seq, result in shorter.items()}, self.seq_len)
        if not found:
            return None
        activations, (c, a, b) = found
        longest = shorter[max(sequences)]
        self.fits.append({"probe": key._asdict(), "sequences": sorted(sequences), "constant": float(c),
                          "linear": float(a), "square": float(b)})
        return replace(longest, peak_bytes=longest.state_bytes + round(activations),
                       seconds=sum(result.seconds for result in shorter.values())), \
            f"seq {', '.join(map(str, sorted(sequences)))} extrapolated to {self.seq_len}, "

    def derives(self, depth: int | None, shallowest: int | None) -> bool:
        """Whether the recompute probe at `depth` is the one at `shallowest` plus what the layers between keep
        (layers_kept), not probed at a raised vocabulary and the whole sequence: a deeper one, where the probes run
        at shorter sequences and both are depth-reduced."""
        return bool(self.sequences and depth and shallowest and depth > shallowest)

    def layers_kept(self, deeper: int, shallower: int, micro: int, granularity: str) -> tuple[float, str] | None:
        """What `deeper` layers, every one recomputed, hold beyond `shallower` at the probes' vocabulary, at the
        model's sequence, and how it was found: a line through their difference at the first rung's two shortest
        sequences, checked at its third (what a recomputed layer keeps is its input, which grows with the tokens,
        and its rotary cache, which does not); None where it misses."""
        keys = [_Key(depth, micro, depth, granularity, 1, self.vocab) for depth in (deeper, shallower)]
        sequences = sorted((self._shorter(keys[0]) or ())[1:])
        for key in keys:
            for seq in sequences:
                self._ask_at(key, seq)
        if not sequences:
            return None
        found = line_extrapolated({seq: _activations(self._result(keys[0], seq))
                                   - _activations(self._result(keys[1], seq)) for seq in sequences}, self.seq_len)
        if not found:
            return None
        kept, (c, a) = found
        self.fits.append({"probe": keys[0]._asdict(), "less_depth": shallower, "sequences": sequences,
                          "constant": float(c), "linear": float(a), "square": 0.0})
        return kept, f"seq {', '.join(map(str, sequences))} extrapolated to {self.seq_len}"

    def probe(self, depth: int | None, micro: int, blocks: int = 0, granularity: str = "full",
              devices: int = 1, vocab: int | None = None) -> ProbeResult:
        key = self.ask(depth, micro, blocks, granularity, devices, vocab)
        if key in self.results:
            return self.results[key]
        result, how = self._collected(key)
        self.results[key] = result
        self.said(key, _activations(result), f"{how}{result.seconds:.1f}s")
        return result

    def said(self, key: _Key, activations: float, how: str) -> None:
        depth, micro, blocks, _, devices, vocab = key
        self.say(f"  probe depth {depth or 'full'} m={micro}" + (f" recompute {blocks}" if blocks else "")
                 + (f" on {devices} ranks" if devices > 1 else "") + (f" vocabulary {vocab:,}" if vocab else "")
                 + f": activations {activations / 2**20:.1f} MiB ({how})")

    def buffer_ratio(self, depth: int | None, micro: int) -> float:
        """paddle.DataParallel's fused gradient buffers over the gradients, from one probe at 2 ranks: what its
        largest rank peaks above the same probe on one (the buffers do not depend on the number of ranks)."""
        alone, ranks = self.probe(depth, micro), _measured(self.probe(depth, micro, devices=2))
        return max(0.0, (ranks.peak_bytes - alone.peak_bytes) / max(1, alone.gradient_bytes or 0))


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
    reduced = bool(_layer_key(counts.shape) and counts.layers > max(RECOMPUTE_DEPTHS))
    scale = 1.0
    if reduced:
        one = _probe_spec(spec, 1, 1.0, counts.shape)
        scale = width_scale(counts, Counts(**backend.count(job_for(one, Strategy(), cpu, probe_budget),
                                                           spec.probe.timeout)))
    depths, recompute_depths = (DEPTHS, RECOMPUTE_DEPTHS) if reduced else ((None,), (None,))
    probed = f"depth {', '.join(map(str, sorted({*DEPTHS, *RECOMPUTE_DEPTHS})))} of {counts.layers}" if reduced \
        else "full depth"
    vocab = probe_vocab(spec, counts.shape)
    prober = _Prober(spec, backends, cpu, scale, counts.shape, vocab, say)
    say(f"estimating {spec.name}: {counts.params:,} parameters ({counts.trainable:,} trained) counted without "
        f"allocating them; activations from CPU probes at {probed}" + (f", width x{scale:g}" if scale < 1 else "")
        + (f", sequence {', '.join(map(str, sorted(prober.sequences)))} of {prober.seq_len}" if prober.sequences
           else ""))
    try:
        with file_lock(device_lock_path(cpu), say, f"probing on {cpu.name}"):
            plain, recomputed, floor, logits = _probe_activations(prober, depths, recompute_depths, counts,
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
    rows = _rows(spec, factors, budget, context)
    notes = _notes(spec, factors, scale, context)
    least, why = micro_batch_floor(spec.settings, next(iter(prober.results.values())).facts)
    least = min(least, spec.micro_batches()[0])  # a target below the floor is its own micro-batch
    if least > 1:
        notes.append(f"no micro-batch below {least} is chosen, as `vramtune probe` chooses none: {why}")
    notes += _sequence_notes(prober)
    if vocab:
        notes.append(f"the probes' vocabulary was {vocab:,} of {counts.shape['vocab_size']:,} entries: the logits, "
                     f"{logits / max(1, getattr(spec.model, 'seq_len', 1)):.2f} bytes per token and vocabulary entry "
                     f"(measured at {vocab:,} and {2 * vocab:,}), scale the activations back")
    return Estimate(spec.name, card_bytes, budget, devices, counts, fit, factors, rows, probed, scale,
                    time.monotonic() - start, prober.count, notes, buffer_ratio=ratio, probe_log=prober.log,
                    least_micro_batch=least, sequence_fits=prober.fits)


def _sequence_notes(prober: _Prober) -> list[str]:
    """How the probes at shorter sequences stood in for the model's (none where they did not run)."""
    if not prober.sequences:
        return []
    rungs = []
    for rung in itertools.count():
        sequences = probe_sequences(prober.seq_len, rung)
        if not sequences:
            break
        checked, *fitted = sequences
        rungs.append(f"{', '.join(map(str, fitted))} checked at {checked}")
    note = (f"the probes that keep every layer's activations ran at shorter sequences than the model's "
            f"{prober.seq_len}: their activations fitted as c + a s + b s^2 through {rungs[0]}"
            + "".join(f"; where it missed (by more than {CHECK_TOLERANCE:.0e} of it), through {r}" for r in rungs[1:])
            + f"; extrapolated to {prober.seq_len}")
    if prober.whole:
        note += "; not exact, so probed at the whole sequence: " + ", ".join(
            f"depth {k.depth or 'full'} m={k.micro_batch}" + (f" vocabulary {k.vocab:,}" if k.vocab else "")
            for k in prober.whole)
    return [note]


def _logits_per_entry(prober: _Prober, depth: int | None, micro: int) -> float:
    """Activation bytes per sample and vocabulary entry: the probe at twice the probes' vocabulary over the same."""
    vocab = prober.vocab or 0
    base = _activations(prober.probe(depth, micro))
    return (_activations(prober.probe(depth, micro, vocab=2 * vocab)) - base) / (vocab * micro)


def _probe_activations(prober: _Prober, depths: tuple[int | None, ...], recompute_depths: tuple[int | None, ...],
                       counts: Counts, recompute: bool) -> tuple[list[tuple[int, int, float]],
                                                                 list[tuple[int, int, float]], float, float]:
    """(plain points, recomputed points, floor, the logits' bytes per sample and vocabulary entry), the points at
    the model's vocabulary (probed at a reduced one where it is large). At the first depth, two micro-batches where
    activations set the peak: doubling from 1 while a transient the size of no activation (the embedding's gradient,
    an optimizer temporary) sets it instead, its level the floor, and once more past it, since the first micro-batch
    above the floor may still sit on it at its half. At the next depth, the smaller of the two. With every layer
    recomputed, at each recompute depth, at the smaller (the larger, doubled while the floor sets the peak, where
    there is one)."""
    first = depths[0]
    sizes = [1, 2]
    for depth in depths:
        prober.ask(depth, 1)  # the likely probes, asked ahead: they run side by side
    if prober.vocab:
        prober.ask(first, 1, vocab=2 * prober.vocab)  # the raised recompute probes are placed from it
    if recompute:  # before micro-batch 2: the probe at a raised vocabulary and the whole sequence is the longest
        _ask_recomputed_ahead(prober, depths, recompute_depths, counts)
    prober.ask(first, 2)
    measured = {m: prober.probe(first, m) for m in sizes}
    beside = held.probed(counts)  # a kit's EMA, in every probe's activations: it does not grow with the micro-batch
    while (_activations(measured[sizes[-1]]) - beside < GROWTH * (_activations(measured[sizes[-2]]) - beside)
           and sizes[-1] < MAX_MICRO_BATCH):
        sizes.append(2 * sizes[-1])
        measured[sizes[-1]] = prober.probe(first, sizes[-1])
    if len(sizes) > 2 and sizes[-1] < MAX_MICRO_BATCH:
        sizes.append(2 * sizes[-1])
        measured[sizes[-1]] = prober.probe(first, sizes[-1])
    floor = max((_activations(measured[m]) for m in sizes[:-2]), default=0.0)
    small, large = sizes[-2:]
    plain = [(first or counts.layers, m, _activations(measured[m])) for m in (small, large)]
    plain += [(depth or counts.layers, small, _activations(prober.probe(depth, small))) for depth in depths[1:]]
    per_entry = _logits_per_entry(prober, first, small) if prober.vocab else 0.0
    vocab = counts.shape.get("vocab_size") or 0
    plain = [(d, m, a + m * per_entry * (vocab - (prober.vocab or vocab))) for d, m, a in plain]
    recomputed: list[tuple[int, int, float]] = []
    if recompute and _blocks(measured[small]):
        micro = large if floor else small
        if prober.vocab and per_entry > 0:
            asked, kept = _ask_recomputed(prober, depths, recompute_depths, micro, per_entry, counts)
            shallower: tuple[int, float, float] | None = None  # depth, activations at the model's, at the probed
            for key, bound in asked:
                added, how = kept.get(key) or (None, "")
                if shallower and added is not None and shallower[2] + added > bound:
                    more = key.recomputed - shallower[0]
                    prober.said(key, shallower[2] + added, f"depth {shallower[0]}'s, and what {more} more layers keep "
                                f"at vocabulary {prober.vocab:,}, {how}")
                    shallower = (key.recomputed, shallower[1] + added, shallower[2] + added)
                else:
                    shallower = (key.recomputed, *_recomputed_at(prober, key, per_entry, vocab, bound))
                recomputed.append((key.recomputed, micro, shallower[1]))
        else:
            recomputed = [_recomputed_point(prober, depth, micro, floor, measured[small])
                          for depth in recompute_depths]
    return plain, recomputed, floor, per_entry


def _blocks(result: ProbeResult) -> tuple[int, str] | None:
    """The model's repeated blocks and the granularity the estimate recomputes them with (full where the model has
    it), as a probe found them; None: no repeated blocks."""
    facts = result.facts
    if not facts.get("total_blocks"):
        return None
    options = facts.get("recompute_options") or {"granularities": ["full"]}
    return facts["total_blocks"], "full" if "full" in options["granularities"] else options["granularities"][0]


def _ask_recomputed_ahead(prober: _Prober, depths: tuple[int | None, ...], recompute_depths: tuple[int | None, ...],
                          counts: Counts) -> None:
    """The probes with every layer recomputed the estimate likely needs, at micro-batch 1 (no floor): at the model's
    vocabulary, at once; at a reduced one, once the probes they are placed from are in (_ask_recomputed)."""
    if prober.vocab:
        _ask_recomputed(prober, depths, recompute_depths, 1, _logits_per_entry(prober, depths[0], 1), counts)
        return
    for depth in recompute_depths:
        if depth:
            prober.ask(depth, 1, depth, "full")


def _recomputed_point(prober: _Prober, depth: int | None, micro: int, floor: float,
                      plain: ProbeResult) -> tuple[int, int, float]:
    """Recomputed activations at the model's vocabulary, probed at it: doubled while the floor sets the peak."""
    total, granularity = _blocks(plain) or (0, "full")
    blocks = depth or total
    result = prober.probe(depth, micro, blocks, granularity)
    while floor and _activations(result) < GROWTH * floor and micro < MAX_MICRO_BATCH:
        micro *= 2
        result = prober.probe(depth, micro, blocks, granularity)
    return blocks, micro, _activations(result)


def _ask_recomputed(prober: _Prober, depths: tuple[int | None, ...], recompute_depths: tuple[int | None, ...],
                    micro: int, per_entry: float, counts: Counts
                    ) -> tuple[list[tuple[_Key, float]], dict[_Key, tuple[float, str] | None]]:
    """At a reduced vocabulary, ask the recompute probes at `micro` where the logits, not a layer rebuilt in backward
    (which no vocabulary changes), set their peak: each the probe's key and the plain probe's peak at the reduced
    vocabulary, which no moment of the recomputed step exceeds (it holds less of each layer), and which the probe's
    peak must pass (_recomputed_at). The vocabulary is where the logits moment, at least the plain probes'
    activations outside the layers plus the logits added, passes by a quarter what a rebuilt moment holds beyond
    them: guessed as REBUILT_LAYERS layers' activations (the one rebuilt and its backward; the checkpoints of the
    others are small), not all of the probe's (Llama-3-8B's shape at depth 3: vocabulary 47k, not 67k); probed at
    full depth, where the layers are not apart, all of them. Each deeper one is asked so where it is not derived from
    the shallowest; with what the layers of those that are keep beyond it (_kept_or_asked)."""
    first, low = depths[0], prober.vocab or 0
    at_first = prober.probe(first, micro)
    found = _blocks(at_first)
    if found is None or per_entry <= 0:
        return [], {}
    total, granularity = found
    per_layer = 0.0
    if len(depths) > 1 and depths[1] and first:
        per_layer = (_activations(prober.probe(depths[1], micro)) - _activations(at_first)) / (depths[1] - first)
    vocab = counts.shape.get("vocab_size") or low
    asked = []
    ordered = sorted(recompute_depths, key=lambda d: d or 0)
    for depth in ordered:
        bound = _activations(at_first) + per_layer * ((depth or 0) - (first or 0))
        layers = per_layer * min(depth or 0, REBUILT_LAYERS) if per_layer else bound
        high = min(vocab, low + ROUND_VOCAB * math.ceil(1.25 * max(0.0, layers) / (micro * per_entry * ROUND_VOCAB)))
        asked.append((_Key(depth, micro, depth or total, granularity, 1, high), bound))
    prober.ask(*asked[0][0])
    return asked, _kept_or_asked(prober, asked)


def _kept_or_asked(prober: _Prober, asked: list[tuple[_Key, float]]) -> dict[_Key, tuple[float, str] | None]:
    """What the layers of each deeper recompute probe (`asked` after the shallowest) keep beyond it, measured at the
    probes' vocabulary and shorter sequences (_Prober.layers_kept), so that it does not run at the raised vocabulary
    and the whole sequence; one without is asked at once at the raised vocabulary, beside the shallowest. The layers
    kept aside are the same whichever moment sets the peak (the logits', or a layer rebuilt in backward: Llama-2-7B's
    shape at 2,048 tokens: 8,388,864 bytes a layer both ways). Without: where it is not derived (_Prober.derives), or
    where their line misses (a moment that overtakes another on the way, as the logits' and a rebuilt layer's do at
    Llama-3-8B's shape: the two depths' moments may differ). The sum must also pass the plain probe's bound, as a
    probed one must (_recomputed_at)."""
    kept = {}
    shallowest = asked[0][0].depth
    for key, _ in asked[1:]:
        derived = prober.derives(key.depth, shallowest)
        kept[key] = prober.layers_kept(key.depth, shallowest, key.micro_batch, key.granularity) if derived else None
        if kept[key] is None:
            prober.ask(*key)
    return kept


def _recomputed_at(prober: _Prober, key: _Key, per_entry: float, vocab: int, bound: float) -> tuple[float, float]:
    """Recomputed activations at the model's vocabulary, from the probe `key` (_ask_recomputed) scaled back, and as
    probed: where its peak is above `bound` (so the logits, not a rebuilt layer, set it), or at the whole
    vocabulary; its vocabulary doubled otherwise."""
    high = key.vocab
    while True:
        above = _activations(prober.probe(*key._replace(vocab=high)))
        if above > bound or high == vocab:
            return above + key.micro_batch * per_entry * (vocab - high), above
        high = min(2 * high, vocab)


@dataclass
class SpecContext:
    """What the spec's rows and notes are told besides the spec."""

    devices: int
    counts: Counts
    fit: ActivationFit
    buffer_ratio: float  # data parallel's buffers over the gradients, measured at 2 ranks (0: one rank)
    blocks_probed: bool  # probes with every repeated block recomputed measured (the model has such blocks)


def _strategies(spec: Spec, context: SpecContext) -> list[Strategy]:
    """Every strategy the ladder would consider on a GPU on the estimate's devices, in the rows' order: fp32, and
    the AMP modes the spec allows, least memory first; within each, every sharding stage with several devices unless
    the spec turns sharding off (none otherwise); within each, none, a quarter, half, three quarters, every counted
    layer recomputed, where the spec allows recompute and the fit says recomputing every layer saves memory (none
    otherwise); the spec's micro-batches innermost."""
    allowed = spec.settings["precision"].allowed
    precisions = ("fp32", *[precision for precision in AMP_PRECISIONS if precision in allowed])
    stages = SHARDING_STAGES if context.devices > 1 and spec.settings["sharding"] else (0,)
    fit, layers = context.fit, context.counts.layers
    saves = fit.s0 + fit.s1 * layers / fit.width_scale > 0
    levels = recompute_levels(layers) if spec.settings["recompute"].enabled and saves else [0]
    per_rank = spec.train.target_batch // context.devices
    return [Strategy(precision=precision, devices=context.devices, sharding_stage=stage, recomputed_blocks=blocks,
                     micro_batch=micro, accumulation=per_rank // micro)
            for precision in precisions for stage in stages for blocks in levels for micro in spec.micro_batches()]


def _rows(spec: Spec, factors: Factors, budget: Budget, context: SpecContext) -> list[Row]:
    """Every strategy's predicted per-rank peak, judged against the budget."""
    given = Given(spec.train.optimizer, spec.settings["precision"].master_grad, context.buffer_ratio)
    rows = []
    for strategy in _strategies(spec, context):
        estimate_row = row(context.counts, context.fit, factors, strategy, given, gpu=True)
        estimate_row.fits = budget.fits(estimate_row.reserved)
        rows.append(estimate_row)
    return rows


def _notes(spec: Spec, factors: Factors, scale: float, context: SpecContext) -> list[str]:
    measured = (f", data parallel's fused gradient buffers (x{context.buffer_ratio:.2f} of the gradients at 2 ranks, "
                "kept at any number of ranks; sharding goes without them)" if context.buffer_ratio else "")
    notes = [f"measured on CPU: the counted state (exact), fp32 activations (probes){measured}; assumed "
             f"({factors.source}): AMP O1 activations x{factors.o1_activations:g} of fp32's, O2 "
             f"x{factors.o2_activations:g}, the GPU allocator's reserve +{factors.fragmentation:.0%}"]
    if scale < 1:
        notes.append(f"the probes were x{scale:g} as wide as the model (a full-width layer does not fit this "
                     "machine's probes): per-layer activations are assumed to scale with the width")
    if spec.source == "paddlenlp" and spec.model.config_fields.get("use_flash_attention"):
        notes.append("use_flash_attention: the CPU measures plain attention ([seq, seq] scores kept): over-stated "
                     "where flash attention runs")
    if spec.settings["recompute"].enabled and not context.blocks_probed:
        notes.append("recompute not estimated: the model has no repeated blocks vramtune recomputes")
    return notes


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
        kept = held.held(counts, state(counts, s, Given())["weights"])  # a kit's EMA, at the probe's precision
        measured = probe.peak_bytes - probe.state_bytes - own_parts(counts, s) - kept
        ratios[level_of(s.precision)].append(measured / fp32)
    stated = Factors()
    return Factors(o1_activations=statistics.median(ratios["O1"]) if ratios["O1"] else stated.o1_activations,
                   o2_activations=statistics.median(ratios["O2"]) if ratios["O2"] else stated.o2_activations,
                   fragmentation=statistics.median(reserve) if reserve else stated.fragmentation,
                   source=f"calibrated from {len(gpu)} GPU probes")
