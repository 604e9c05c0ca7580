"""Tensor parallel for real: PaddleFormers 1.2's tiny Llama with tensor_model_parallel_size 2 on 2 CPU ranks under
`python -m paddle.distributed.launch` (gloo, bench/parallel/cpu_compat.py's CPU stand-ins in its children only), each
rank's host allocator peak beside the layouts' estimate (bench/parallel_ranks.py runs the other layouts). The launch
is waited on to its end; nothing here is timed."""
from __future__ import annotations

import sys

import pytest
from conftest import ROOT, needs_paddleformers

pytestmark = [pytest.mark.paddle, needs_paddleformers]
sys.path.insert(0, str(ROOT / "bench"))

from parallel_ranks import LAYOUTS, estimate, measure  # noqa: E402


@pytest.mark.slow(30)
def test_two_tensor_parallel_ranks_peak_as_estimated():
    args, layout, processes = LAYOUTS["tp2"]
    reports = measure(args, processes, {}, sys.executable)
    assert [report["rank"] for report in reports] == [0, 1]
    # every rank builds half the matmuls and the vocabulary, the norms whole: 60,480 of the 120,640 parameters
    assert [report["params"] for report in reports] == [60_480, 60_480]
    assert reports[0]["losses"] == reports[1]["losses"]  # one model: the same loss on both ranks
    assert reports[0]["peak"] == reports[1]["peak"]
    (predicted,) = estimate(layout, {})
    assert predicted["peak"] / reports[0]["peak"] == pytest.approx(1.0, abs=0.03)
