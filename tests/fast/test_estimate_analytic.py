"""The analytic activation model's structure (no Paddle): experts resident but only the top-k active, flash attention
without the [s, s] terms, recompute between the loss's backward and a layer's rebuilding."""
from __future__ import annotations

import dataclasses

import pytest
from conftest import SPECS

from vramtune.memory.analytic import KEPT, LOGITS, activations, layer_bytes
from vramtune.memory.architecture import Moe, architecture, count, read_config

ERNIE = architecture(read_config(SPECS / "configs" / "ernie-4.5-21b-a3b.json"))


def test_experts_are_resident_but_only_the_top_k_hold_activations():
    more = dataclasses.replace(ERNIE, moe=dataclasses.replace(ERNIE.moe, experts=128))
    assert count(more).params > count(ERNIE).params  # every expert's weights counted
    assert layer_bytes(more, 4096, 1, True) == layer_bytes(ERNIE, 4096, 1, True)  # the same tokens' activations
    wider: Moe = dataclasses.replace(ERNIE.moe, top_k=12)
    extra = layer_bytes(dataclasses.replace(ERNIE, moe=wider), 4096, 1, True) - layer_bytes(ERNIE, 4096, 1, True)
    assert extra == 4096 * 6 * (13.75 * 1536 + 8.0 * 2560)  # six more experts' intermediates and routed copies
    assert layer_bytes(ERNIE, 4096, 0, True) != layer_bytes(ERNIE, 4096, 1, True)  # layer 0 is dense


def test_flash_attention_keeps_no_sequence_squared_terms():
    eager, flash = activations(ERNIE, 4096, False), activations(ERNIE, 4096, True)
    assert flash.outside == LOGITS * 4096 * ERNIE.vocab + ERNIE.mtp_layers * (
        layer_bytes(ERNIE, 4096, ERNIE.layers, True) + LOGITS * 4096 * ERNIE.vocab)
    assert eager.layer - flash.layer == pytest.approx(9.59 * ERNIE.heads * 4096 * 4096)  # ERNIE-4.5: fused


def test_recompute_keeps_each_layers_input_and_peaks_while_one_is_rebuilt():
    fit = activations(ERNIE, 4096, True)
    assert fit.kept == KEPT * 4096 * ERNIE.hidden
    none, every = fit.activations(28, 2, 0), fit.activations(28, 2, 28)
    assert none == 2 * (fit.outside + 28 * fit.layer)
    assert every == 2 * max(fit.outside + 28 * fit.kept, 0.38 * fit.outside + 28 * fit.kept + 1.16 * fit.layer)
    assert none > fit.activations(28, 2, 14) > every
