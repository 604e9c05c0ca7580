"""Which CPU probes a spec's activation fit needs, and the points they give: plain activations at two micro-batches
where activations (not a transient) set the peak and at a second depth, activations with every layer recomputed at
each recompute depth, all at the model's vocabulary (probed at a reduced one where it is large, the logits' bytes per
vocabulary entry measured between two reduced vocabularies scaling them back)."""
from __future__ import annotations

import math

from vramtune.core.records import ProbeResult
from vramtune.estimating.prober import Key, Prober, activations_of
from vramtune.memory import held
from vramtune.memory.state import Counts

GROWTH = 1.25  # activations growing less than this from m to 2m: a transient, not activations, sets the peak
MAX_MICRO_BATCH = 64
ROUND_VOCAB = 64  # a recompute probe's raised vocabulary: a multiple of this
REBUILT_LAYERS = 2  # a recomputed step's rebuilt moment, guessed in layers' activations (checked by each probe)


def probe_activations(prober: Prober, depths: tuple[int | None, ...], recompute_depths: tuple[int | None, ...],
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
    while (activations_of(measured[sizes[-1]]) - beside < GROWTH * (activations_of(measured[sizes[-2]]) - beside)
           and sizes[-1] < MAX_MICRO_BATCH):
        sizes.append(2 * sizes[-1])
        measured[sizes[-1]] = prober.probe(first, sizes[-1])
    if len(sizes) > 2 and sizes[-1] < MAX_MICRO_BATCH:
        sizes.append(2 * sizes[-1])
        measured[sizes[-1]] = prober.probe(first, sizes[-1])
    floor = max((activations_of(measured[m]) for m in sizes[:-2]), default=0.0)
    small, large = sizes[-2:]
    plain = [(first or counts.layers, m, activations_of(measured[m])) for m in (small, large)]
    plain += [(depth or counts.layers, small, activations_of(prober.probe(depth, small))) for depth in depths[1:]]
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


def _logits_per_entry(prober: Prober, depth: int | None, micro: int) -> float:
    """Activation bytes per sample and vocabulary entry: the probe at twice the probes' vocabulary over the same."""
    vocab = prober.vocab or 0
    base = activations_of(prober.probe(depth, micro))
    return (activations_of(prober.probe(depth, micro, vocab=2 * vocab)) - base) / (vocab * micro)


def _blocks(result: ProbeResult) -> tuple[int, str] | None:
    """The model's repeated blocks and the granularity the estimate recomputes them with (full where the model has
    it), as a probe found them; None: no repeated blocks."""
    facts = result.facts
    if not facts.get("total_blocks"):
        return None
    options = facts.get("recompute_options") or {"granularities": ["full"]}
    return facts["total_blocks"], "full" if "full" in options["granularities"] else options["granularities"][0]


def _ask_recomputed_ahead(prober: Prober, depths: tuple[int | None, ...], recompute_depths: tuple[int | None, ...],
                          counts: Counts) -> None:
    """The probes with every layer recomputed the estimate likely needs, at micro-batch 1 (no floor): at the model's
    vocabulary, at once; at a reduced one, once the probes they are placed from are in (_ask_recomputed)."""
    if prober.vocab:
        _ask_recomputed(prober, depths, recompute_depths, 1, _logits_per_entry(prober, depths[0], 1), counts)
        return
    for depth in recompute_depths:
        if depth:
            prober.ask(depth, 1, depth, "full")


def _recomputed_point(prober: Prober, depth: int | None, micro: int, floor: float,
                      plain: ProbeResult) -> tuple[int, int, float]:
    """Recomputed activations at the model's vocabulary, probed at it: doubled while the floor sets the peak."""
    total, granularity = _blocks(plain) or (0, "full")
    blocks = depth or total
    result = prober.probe(depth, micro, blocks, granularity)
    while floor and activations_of(result) < GROWTH * floor and micro < MAX_MICRO_BATCH:
        micro *= 2
        result = prober.probe(depth, micro, blocks, granularity)
    return blocks, micro, activations_of(result)


def _ask_recomputed(prober: Prober, depths: tuple[int | None, ...], recompute_depths: tuple[int | None, ...],
                    micro: int, per_entry: float, counts: Counts
                    ) -> tuple[list[tuple[Key, float]], dict[Key, tuple[float, str] | None]]:
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
        per_layer = (activations_of(prober.probe(depths[1], micro)) - activations_of(at_first)) / (depths[1] - first)
    vocab = counts.shape.get("vocab_size") or low
    asked = []
    ordered = sorted(recompute_depths, key=lambda d: d or 0)
    for depth in ordered:
        bound = activations_of(at_first) + per_layer * ((depth or 0) - (first or 0))
        layers = per_layer * min(depth or 0, REBUILT_LAYERS) if per_layer else bound
        high = min(vocab, low + ROUND_VOCAB * math.ceil(1.25 * max(0.0, layers) / (micro * per_entry * ROUND_VOCAB)))
        asked.append((Key(depth, micro, depth or total, granularity, 1, high), bound))
    prober.ask(*asked[0][0])
    return asked, _kept_or_asked(prober, asked)


def _kept_or_asked(prober: Prober, asked: list[tuple[Key, float]]) -> dict[Key, tuple[float, str] | None]:
    """What the layers of each deeper recompute probe (`asked` after the shallowest) keep beyond it, measured at the
    probes' vocabulary and shorter sequences (Prober.layers_kept), so that it does not run at the raised vocabulary
    and the whole sequence; one without is asked at once at the raised vocabulary, beside the shallowest. The layers
    kept aside are the same whichever moment sets the peak (the logits', or a layer rebuilt in backward: Llama-2-7B's
    shape at 2,048 tokens: 8,388,864 bytes a layer both ways). Without: where it is not derived (Prober.derives), or
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


def _recomputed_at(prober: Prober, key: Key, per_entry: float, vocab: int, bound: float) -> tuple[float, float]:
    """Recomputed activations at the model's vocabulary, from the probe `key` (_ask_recomputed) scaled back, and as
    probed: where its peak is above `bound` (so the logits, not a rebuilt layer, set it), or at the whole
    vocabulary; its vocabulary doubled otherwise."""
    high = key.vocab
    while True:
        above = activations_of(prober.probe(*key._replace(vocab=high)))
        if above > bound or high == vocab:
            return above + key.micro_batch * per_entry * (vocab - high), above
        high = min(2 * high, vocab)
