"""`vramtune estimate` on a PaddleOCR config with Global.use_ema: the EMA's fp32 shadows and the copies of the state
tools/program.py keeps aside are counted (a part of each row's state, at its precision), taken out of the CPU probes'
measured activations (which held them in fp32), said in a note; and the fp32 figure is what a probe measures."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kit_client as client
import pytest
from conftest import HUNG
from test_kits_estimate import options

from vramtune.core.strategy import Strategy
from vramtune.memory.state import ActivationFit, Counts, Factors, Given, row
from vramtune.plugins import MECHANISMS

OCR = client.kit("PaddleOCR")
EN_V3 = "configs/rec/PP-OCRv3/en_PP-OCRv3_mobile_rec.yml"  # SVTR_LCNet with a SAR head (LSTMs), one scale
# batch 4, the loader's thread reading ahead in the process; the shipped keys keep 3 copies (an evaluation every
# 2000 steps, 500 epochs saved every 3)
SHAPE = ["Train.loader.batch_size_per_card=4", "Eval.loader.batch_size_per_card=4", "Train.loader.num_workers=0"]
PARAMS, STATE_ELEMENTS = 13_719_876, 22_124_868  # the state_dict names each LSTM weight twice: ModelEMA's shadows
EMA = 4 * STATE_ELEMENTS + 3 * 4 * PARAMS  # fp32: 88,499,472 B of shadows and 3 x 54,879,504 B of weights


def test_a_row_counts_the_ema_at_its_precision_and_takes_the_probes_fp32_bytes_out_of_the_activations():
    """The probes held 4 B per shadow element and 3 fp32 copies of the weights in their activations; a bf16-o2 row
    keeps the shadows in fp32, copies the half weights, and scales only the activations without them."""
    counts = Counts(params=PARAMS, trainable=PARAMS, ema_elements=STATE_ELEMENTS, state_copies=3)
    plain = Counts(params=PARAMS, trainable=PARAMS)
    fit = ActivationFit(a0=EMA + 10_000_000, b0=50_000_000, b1=0.0)  # as the fp32 probes measured them
    factors, given = Factors(), Given("adam")
    fp32, o2 = Strategy(micro_batch=4), Strategy(micro_batch=4, precision="bf16-o2")
    assert row(MECHANISMS, counts, fit, factors, fp32, given, gpu=False).peak == \
        4 * PARAMS * 4 + EMA + 10_000_000 + 4 * 50_000_000  # weights, gradients, Adam's two moments; as probed
    ema_row = row(MECHANISMS, counts, fit, factors, o2, given, gpu=False)
    plain_row = row(MECHANISMS, plain, fit, factors, o2, given, gpu=False)
    assert ema_row.state["ema"] == 4 * STATE_ELEMENTS + 3 * 2 * PARAMS
    assert ema_row.activations == int(0.5 * (10_000_000 + 4 * 50_000_000))
    assert "ema" not in plain_row.state and plain_row.activations == int(0.5 * (EMA + 10_000_000 + 4 * 50_000_000))


def run_vramtune(*arguments: str, cwd: Path) -> tuple[dict, str]:
    """A vramtune command's --json answer and what it said, run as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "vramtune", *arguments, "--json"], cwd=cwd, capture_output=True,
                          text=True, timeout=HUNG, env={**client.child_env(), "VRAMTUNE_CACHE": str(cwd / "cache")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), " ".join(done.stderr.split())


@pytest.mark.paddle
@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
@pytest.mark.skipif(not client.has_requirements("PaddleOCR"), reason=client.missing_reason("PaddleOCR"))
@pytest.mark.slow(40)
def test_the_estimate_of_an_ema_config_counts_the_ema_and_predicts_what_a_probe_measures(tmp_path):
    config = str(OCR / EN_V3)
    plain, _ = run_vramtune("estimate", config, "--card", "24GiB", *options(SHAPE), cwd=tmp_path)
    with_ema, said = run_vramtune("estimate", config, "--card", "24GiB", *options([*SHAPE, "Global.use_ema=true"]),
                                  cwd=tmp_path)
    assert (with_ema["counts"]["params"], with_ema["counts"]["ema_elements"]) == (PARAMS, STATE_ELEMENTS)
    assert with_ema["counts"]["state_copies"] == 3 and plain["counts"]["ema_elements"] == 0
    assert with_ema["probes"] == plain["probes"] == 2  # the EMA's constant bytes are no transient to probe past

    def at(report: dict, precision: str) -> dict:
        return next(r for r in report["rows"] if (r["precision"], r["micro_batch"]) == (precision, 4))

    assert at(with_ema, "fp32")["ema"] == EMA and "ema" not in at(plain, "fp32")
    assert at(with_ema, "bf16-o2")["ema"] == 4 * STATE_ELEMENTS + 3 * at(plain, "bf16-o2")["weights"]
    for precision in ("fp32", "bf16-o2"):  # the EMA's bytes above the same config without it, within the estimate's
        ema_row, plain_row = at(with_ema, precision), at(plain, precision)  # 3%
        assert ema_row["peak_bytes"] - plain_row["peak_bytes"] == pytest.approx(ema_row["ema"],
                                                                               abs=0.03 * ema_row["peak_bytes"])
    measured, _ = run_vramtune("measure", config, *options([*SHAPE, "Global.use_ema=true"]), "--device", "cpu",
                               "--budget", "4GiB", "-m", "4", cwd=tmp_path)
    assert at(with_ema, "fp32")["peak_bytes"] == pytest.approx(measured["peak_bytes"], rel=0.03)
    assert ("note: counted: the kit's EMA, fp32 shadows of the model's state (88,499,472 B), and 3 copies of its "
            "weights that tools/program.py keeps aside (x3 the weights as each row holds them: 164,638,512 B in "
            "fp32); the CPU probes held them in fp32, and their bytes are taken out of the measured activations"
            ) in said
    assert "optimizer state 156.9 MiB, EMA and the copies kept (counted) 163.0 MiB, activations" in said  # bf16-o2
