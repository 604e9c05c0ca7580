"""The analytic activation model (vramtune/estimating/analytic.py) against PaddleFormers' own Llama and ERNIE-4.5
trained on CPU (fp32, eager attention) at a shape its coefficients were not fitted to: 4 layers, 8 samples, with
no layer and with every layer recomputed (as PaddleFormers' workflow sets it on the model)."""
from __future__ import annotations

import sys

import pytest
from conftest import ROOT, needs_paddleformers

from vramtune.memory.analytic import activations
from vramtune.memory.architecture import architecture

pytestmark = [pytest.mark.paddle, needs_paddleformers]
sys.path.insert(0, str(ROOT / "bench"))

from estimate_activations import HELD_OUT, measure  # noqa: E402


@pytest.mark.parametrize("config, seq, recompute", [(*HELD_OUT[0], False), (*HELD_OUT[1], True)],
                         ids=["llama", "ernie4_5-recompute"])  # the other two: bench/estimate_activations.py
@pytest.mark.slow(25)
def test_predicted_activations_of_a_shape_the_fit_never_saw(config, seq, recompute, tmp_path):
    layers, micro = 4, 8
    predicted = activations(architecture({**config, "num_hidden_layers": layers}), seq, flash=False)
    measured = measure(config, tmp_path, micro, seq, layers, recompute)
    assert predicted.activations(layers, micro, layers if recompute else 0) == pytest.approx(measured, rel=0.09)
