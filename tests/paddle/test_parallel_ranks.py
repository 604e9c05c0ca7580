"""Tensor parallel for real: PaddleFormers 1.2's tiny Llama with tensor_model_parallel_size 2 on 2 CPU ranks under
`python -m paddle.distributed.launch` (gloo, the tensor-parallel mechanism's CPU stand-ins,
vramtune/mechanisms/tensor_parallel/cpu_stand_ins.py, in its children only), each
rank's host allocator peak beside the layouts' estimate (bench/parallel_ranks.py runs the other layouts); and the
stand-ins' own allocations against what Paddle's GPU kernels allocate. Each launch is waited on to its end; nothing
here is timed."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, needs_paddleformers

pytestmark = [pytest.mark.paddle, needs_paddleformers]
sys.path.insert(0, str(ROOT / "bench"))

from parallel_ranks import LAYOUTS, bounded, estimate, measure  # noqa: E402


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


@pytest.mark.slow(15)
def test_the_cpu_stand_ins_allocate_what_the_gpu_kernels_allocate():
    """c_identity: a copy of x (c_identity_kernel_impl.h); c_softmax_with_cross_entropy: its softmax [N, V/mp] and
    loss [N, 1] kept (the stand-in also keeps the label's local index and mask, 9 bytes per token), the grad
    kernel's logits_grad [N, V/mp] in the backward (beside a few [N, 1] temporaries)."""
    with tempfile.TemporaryDirectory() as logs:
        bounded([sys.executable, "-m", "paddle.distributed.launch", "--log_dir", logs, "--nproc_per_node", "2",
                 str(ROOT / "bench" / "parallel" / "stand_ins.py")], cwd=ROOT)
        outputs = [path.read_text() for path in sorted(Path(logs).glob("workerlog.*"))]
    reports = [json.loads(line.split(" ", 1)[1]) for output in outputs for line in output.splitlines()
               if line.startswith("VRAMTUNE_STAND_INS ")]
    assert len(reports) == 2, "\n".join(outputs)
    for report in reports:
        tokens = report["loss"] // 4
        assert report["identity"] == report["x"]
        assert report["softmax"] + report["loss"] <= report["kept"] <= report["softmax"] + report["loss"] + 9 * tokens
        assert report["softmax"] <= report["backward"] <= report["softmax"] + 24 * tokens
