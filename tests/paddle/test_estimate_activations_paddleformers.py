"""The analytic activation model (vramtune/estimating/analytic.py) against PaddleFormers' own Llama and ERNIE-4.5
trained on CPU (fp32, eager attention) at a shape its coefficients were not fitted to: 4 layers, 8 samples."""
from __future__ import annotations

import sys

import pytest
from conftest import ROOT, needs_paddleformers

from vramtune.estimating.analytic import activations
from vramtune.estimating.architecture import architecture

pytestmark = [pytest.mark.paddle, needs_paddleformers]
sys.path.insert(0, str(ROOT / "bench"))

from estimate_activations import HELD_OUT, measure  # noqa: E402


@pytest.mark.parametrize("config, seq", HELD_OUT, ids=[config["model_type"] for config, _ in HELD_OUT])
def test_predicted_activations_of_a_shape_the_fit_never_saw(config, seq, tmp_path):
    layers, micro = 4, 8
    predicted = activations(architecture({**config, "num_hidden_layers": layers}), seq, flash=False)
    measured = measure(config, tmp_path, micro, seq, layers)
    assert predicted.activations(layers, micro, 0) == pytest.approx(measured, rel=0.08), measured
