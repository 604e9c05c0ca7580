"""A probe at the model's sequence length, stood in for by probes at shorter ones (issue 27): every tensor of a
sample grows with its tokens, the attention scores with their square, and what is there whatever the sequence (the
rotary cos/sin cache each Llama layer builds at max_position_embeddings x head size x 2 in fp32: a tensor, not a
parameter, so counted among the activations) is a constant beside them. So a probe's activations are c + a s + b s^2
over the sequence s: fitted through three short sequences, checked at a fourth, longer one, extrapolated to the
model's. Exact
arithmetic (fractions of bytes): on Llama's shapes the fit is exact to the byte, so a check that misses by more than
CHECK_TOLERANCE means something else sets the peak (a transient, a moment that moves with the sequence), and the
estimate probes at the whole sequence instead."""
from __future__ import annotations

from fractions import Fraction

RUNGS = (((2, 4, 6), 8), ((4, 6, 8), 12))  # (fitted, checked) sequences in 32nds of the model's: c + a s + b s^2
# through the fitted, checked at a longer one, which misses if a fitted probe sat on a floor (a peak before the steps:
# a larger vocabulary's build) or a moment that grows faster overtook (the attention's, with the square); where the
# first rung misses, the next drops its shortest and checks further up
MIN_SEQUENCE = 32  # the shortest probed sequence
CHECK_TOLERANCE = 1e-4  # the check's miss over the checked activations beyond which the fit is not exact


def probe_sequences(seq_len: int, rung: int = 0) -> tuple[int, ...] | None:
    """The shorter sequences that stand in for `seq_len` at a rung, the checked one first (None: no such rung, or
    the sequence is too short to gain from them)."""
    if rung >= len(RUNGS) or not seq_len or seq_len % 32 or seq_len // 32 * min(RUNGS[0][0]) < MIN_SEQUENCE:
        return None
    fitted, checked = RUNGS[rung]
    return tuple(seq_len // 32 * part for part in (checked, *fitted))


def quadratic(points: dict[int, float]) -> tuple[Fraction, Fraction, Fraction]:
    """(c, a, b) of c + a s + b s^2 through three (sequence, activations) points."""
    (s1, y1), (s2, y2), (s3, y3) = ((Fraction(s), Fraction(y)) for s, y in sorted(points.items()))
    b = ((y3 - y1) / (s3 - s1) - (y2 - y1) / (s2 - s1)) / (s3 - s2)
    a = (y2 - y1) / (s2 - s1) - b * (s1 + s2)
    return y1 - a * s1 - b * s1 * s1, a, b


def at(coefficients: tuple[Fraction, Fraction, Fraction], seq: int) -> float:
    c, a, b = coefficients
    return float(c + a * seq + b * seq * seq)


def extrapolated(measured: dict[int, float], seq_len: int) -> tuple[float, tuple[Fraction, Fraction, Fraction]] | None:
    """The activations at `seq_len` from those measured at the shorter sequences (probe_sequences: the checked one
    first), and the fit's coefficients; None where the fit through the others misses the checked one by more than
    CHECK_TOLERANCE."""
    checked, *fitted = measured
    coefficients = quadratic({s: measured[s] for s in fitted})
    if abs(at(coefficients, checked) - measured[checked]) > CHECK_TOLERANCE * max(1.0, abs(measured[checked])):
        return None
    return at(coefficients, seq_len), coefficients


def line_extrapolated(measured: dict[int, float], seq_len: int) -> tuple[float, tuple[Fraction, Fraction]] | None:
    """The value at `seq_len` of the line c + a s through the two shortest of three (sequence, value) points, checked
    at the longest (None where it misses by more than CHECK_TOLERANCE of it), and (c, a)."""
    (s1, y1), (s2, y2), (s3, y3) = sorted((Fraction(s), Fraction(y)) for s, y in measured.items())
    a = (y2 - y1) / (s2 - s1)
    c = y1 - a * s1
    if abs(c + a * s3 - y3) > CHECK_TOLERANCE * max(1, abs(y3)):
        return None
    return float(c + a * seq_len), (c, a)
