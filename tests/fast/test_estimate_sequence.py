"""The estimate's shorter-sequence probes (issue 27), their arithmetic: which sequences stand in for the model's, the
fit c + a s + b s^2 exact in bytes, and the check that refuses a fit through a probe sitting on a floor."""
from __future__ import annotations

from vramtune.memory.sequence import extrapolated, probe_sequences


def activations(seq: int) -> int:
    """Llama-2-7B's depth-1 probe shape: the rotary cache (4,194,564 B), per token and per token squared."""
    return 4_194_564 + 77_306 * seq + 32 * seq * seq


def test_a_long_sequence_is_probed_at_sixteenths_checked_at_a_quarter_and_a_short_one_whole():
    assert probe_sequences(2048) == (512, 128, 256, 384)  # the checked one first
    assert probe_sequences(256) is None  # 16 tokens: too short to gain
    assert probe_sequences(1000) is None  # not in 32nds
    assert probe_sequences(0) is None


def test_the_fit_through_short_sequences_is_exact_at_the_whole_one():
    sequences = probe_sequences(2048)
    found = extrapolated({seq: activations(seq) for seq in sequences}, 2048)
    assert found is not None
    value, (c, a, b) = found
    assert (c, a, b) == (4_194_564, 77_306, 32)
    assert value == activations(2048)


def test_a_probe_on_a_floor_fails_the_check():
    sequences = probe_sequences(2048)
    floor = activations(200)  # a transient before the steps sets the shortest probe's peak
    assert extrapolated({seq: max(floor, activations(seq)) for seq in sequences}, 2048) is None
