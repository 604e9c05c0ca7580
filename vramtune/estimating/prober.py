"""The CPU probes of a spec's estimate: the spec shrunk to a depth (and width, and vocabulary, and sequence), probed
side by side through the same backend as `vramtune probe` (isolated children, memory only), each collected in the
order it is asked for."""
from __future__ import annotations

import copy
import queue
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, NamedTuple

from vramtune.core.records import Budget, Judge, ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.memory.sequence import extrapolated, line_extrapolated, probe_sequences
from vramtune.memory.state import Counts
from vramtune.probing.forking import ForkServer
from vramtune.probing.runner import DeviceError
from vramtune.search import BuildFailure
from vramtune.spec import Spec, apply_overrides, spec_from_dict
from vramtune.tuning.session import job_for, unsupported

PROBE_STATE_CAP = 5 << 28  # a probe's fp32 weights, gradients and AdamW state at its deepest: narrower above this
# (a ~110M Llama's 3 layers and embeddings, 1.1 GB, probe at full width; a 7B layer alone is 3.2 GB)
DEPTHS = (1, 2)  # plain activations: linear in depth from the first layer on
RECOMPUTE_DEPTHS = (2, 3)  # recompute's saving from the second on: under LoRA, recomputing the first saves nothing
PROBE_BUDGET = 1 << 40  # CPU budgets are virtual: probes are measured, never judged here
SIDE_BY_SIDE = 2  # probes at once: each is its own process and peak; more would add memory, not answers
PROBE_TIMEOUT = 1800.0  # at least this per probe: a 7B layer at the whole sequence and a raised vocabulary takes
# 100-300 s on a busy 2-core CPU, where the spec's timeout (300 s) is meant for a GPU probe that hangs
LARGE_LOGITS = 1 << 27  # a sample's fp32 logits (sequence x vocabulary x 4 bytes) from which the vocabulary is reduced
VOCAB_DIVISOR = 16  # the probes' vocabulary: the model's over this (Llama-2's 32000 -> 2000, Llama-3's 128256 -> 8016)
Say = Callable[[str], None]


def layer_key(shape: dict[str, Any]) -> str | None:
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


def probe_spec(spec: Spec, steps: int, depth: int | None, scale: float, shape: dict[str, Any],
               vocab: int | None = None, seq: int | None = None) -> Spec:
    """The spec shrunk for a probe: depth layers (None: as it is), width x scale, a vocabulary of `vocab` entries
    (None: the model's), a sequence of `seq` tokens (None: the spec's), on CPU, one warmup and `steps` measured steps
    (one, or the spec's where its steps take turns over input shapes), no evaluation."""
    raw = apply_overrides(spec.raw, {"device": "cpu", "budget": PROBE_BUDGET, "headroom": 0.0, "devices": 1,
                                     "probe.steps": steps, "probe.warmup": 1, "data.seq_len": seq})
    raw.get("train", {}).pop("evaluation", None)
    overrides = dict(raw["model"].get("overrides") or {})
    key = layer_key(shape)
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


def activations_of(result: ProbeResult) -> float:
    return float(_measured(result).peak_bytes - result.state_bytes)


class Key(NamedTuple):
    """A probe the estimate asks for, at the whole sequence or the shorter ones that stand in for it (its fields are
    the probe log's and the sequence fits' `probe`)."""

    depth: int | None  # None: the model's layers
    micro_batch: int
    recomputed: int  # blocks
    granularity: str
    devices: int
    vocab: int | None  # None: the model's


class Prober:
    """The CPU probes of one estimate: the spec shrunk to a depth (and width, and vocabulary), SIDE_BY_SIDE at once
    (each backend with a fork server of its own: one server forks one probe at a time); probes may be asked ahead
    (`ask`), and each is said, in the order they are collected (`probe`), so the output does not depend on timing.
    Where the model's sequence is long (sequence.probe_sequences), each probe that keeps every layer's activations is
    four at shorter sequences whose activations, fitted and checked, are extrapolated to the model's (a second rung
    of four where the check misses; one at the whole sequence where that misses too)."""

    def __init__(self, spec: Spec, steps: int, backends: list[Any], cpu: Any, scale: float, shape: dict[str, Any],
                 vocab: int | None, say: Say, judges: list[Judge]):
        """steps: measured in each probe (probe_spec); backends: SIDE_BY_SIDE of them, each with a fork server of its
        own (twin()); judges: the mechanisms' phases that must fit too (ProbeResult.judged)."""
        self.spec, self.steps, self.cpu, self.scale, self.shape = spec, steps, cpu, scale, shape
        self.vocab, self.say, self.judges = vocab, say, judges
        self.seq_len = getattr(spec.model, "seq_len", 0) or 0
        self.sequences = probe_sequences(self.seq_len)
        self.whole: list[Key] = []  # the probes at the whole sequence: where the shorter ones' fit was not exact
        self.fits: list[dict[str, Any]] = []  # each extrapolated probe's c + a s + b s^2
        self.asked: dict[tuple[Key, int | None], Future] = {}  # each probe at a sequence (None: the whole)
        self.log: list[dict[str, Any]] = []
        self.start = time.monotonic()
        self.results: dict[Key, ProbeResult] = {}
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
            vocab: int | None = None) -> Key:
        """Start a probe (once: at the shorter sequences, or the whole one); returns its key."""
        key = Key(depth, micro, blocks, granularity, devices, vocab or self.vocab)
        for seq in self._shorter(key) or (None,):
            self._ask_at(key, seq)
        return key

    def _shorter(self, key: Key, rung: int = 0) -> tuple[int, ...] | None:
        """The shorter sequences probe `key` runs at, at a rung (None: the whole one). With layers recomputed, only
        at a reduced vocabulary: on Paddle 2.6, whose peak counts from the process's start, the build's temporaries of
        its embedding and head (Llama-2-7B's at 26,960 entries: 113.7 MiB) set their peak up to a quarter of the
        sequence."""
        at_model_vocab = key.recomputed and (not self.vocab or key.vocab != self.vocab)  # raised, or never reduced
        return None if at_model_vocab or not self.sequences else probe_sequences(self.seq_len, rung)

    def _ask_at(self, key: Key, seq: int | None) -> None:
        if (key, seq) in self.asked:
            return
        depth, micro, blocks, granularity, devices, vocab = key
        spec = probe_spec(self.spec, self.steps, depth, self.scale, self.shape, vocab, seq)
        strategy = Strategy(micro_batch=micro, recomputed_blocks=blocks, recompute_granularity=granularity,
                            devices=devices)
        # the data's shapes are checked once: the depth, width and vocabulary change no shape the data meets
        self.asked[(key, seq)] = self.pool.submit(self._measure, spec, strategy, not self.asked, key, seq)

    def _measure(self, spec: Spec, strategy: Strategy, check_sample: bool, key: Key, seq: int | None
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
            result = result.judged(budget, self.judges)
        finally:
            self.backends.put(backend)
        self.log.append({"probe": {**key._asdict(), "seq": seq},
                         "started": round(started, 2), "ended": round(time.monotonic() - self.start, 2),
                         "phases": result.phases, "activations": result.peak_bytes and result.state_bytes
                         and result.peak_bytes - result.state_bytes})
        return result

    def until_rebuild(self, key: Key) -> bool:
        """Whether the probe `key` may end where backward first rebuilds a layer: one with its layers recomputed at
        a raised vocabulary below the model's, whose peak is the logits' before that moment wherever it counts
        (_recomputed_at: above the plain probe's bound, which no moment of a rebuilt layer passes)."""
        raised = self.vocab is not None and self.vocab < (key.vocab or 0) < (self.shape.get("vocab_size") or 0)
        return bool(key.recomputed) and raised

    def _result(self, key: Key, seq: int | None) -> ProbeResult:
        result = self.asked[(key, seq)].result()
        if result.error_kind == "build":
            raise BuildFailure(result.error)
        return result

    def _collected(self, key: Key) -> tuple[ProbeResult, str]:
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

    def _rung(self, key: Key, rung: int) -> tuple[ProbeResult, str] | None:
        """The probe `key` extrapolated from a rung's shorter sequences (a result of the longest of them with the
        extrapolated peak), and how; None where their fit misses."""
        sequences = self._shorter(key, rung) or ()
        for seq in sequences:
            self._ask_at(key, seq)
        shorter = {seq: self._result(key, seq) for seq in sequences}
        found = extrapolated({seq: activations_of(result) for seq, result in shorter.items()}, self.seq_len)
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
        keys = [Key(depth, micro, depth, granularity, 1, self.vocab) for depth in (deeper, shallower)]
        sequences = sorted((self._shorter(keys[0]) or ())[1:])
        for key in keys:
            for seq in sequences:
                self._ask_at(key, seq)
        if not sequences:
            return None
        found = line_extrapolated({seq: activations_of(self._result(keys[0], seq))
                                   - activations_of(self._result(keys[1], seq)) for seq in sequences}, self.seq_len)
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
        self.said(key, activations_of(result), f"{how}{result.seconds:.1f}s")
        return result

    def said(self, key: Key, activations: float, how: str) -> None:
        depth, micro, blocks, _, devices, vocab = key
        self.say(f"  probe depth {depth or 'full'} m={micro}" + (f" recompute {blocks}" if blocks else "")
                 + (f" on {devices} ranks" if devices > 1 else "") + (f" vocabulary {vocab:,}" if vocab else "")
                 + f": activations {activations / 2**20:.1f} MiB ({how})")

    def buffer_ratio(self, depth: int | None, micro: int) -> float:
        """paddle.DataParallel's fused gradient buffers over the gradients, from one probe at 2 ranks: what its
        largest rank peaks above the same probe on one (the buffers do not depend on the number of ranks)."""
        alone, ranks = self.probe(depth, micro), _measured(self.probe(depth, micro, devices=2))
        return max(0.0, (ranks.peak_bytes - alone.peak_bytes) / max(1, alone.gradient_bytes or 0))
