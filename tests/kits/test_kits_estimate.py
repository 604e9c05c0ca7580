"""`vramtune estimate` on a kit config: the kit's overrides (-O), the predicted best said as the kit's own overrides,
bad input; and, with real Paddle, the estimate of the config's batch against a real probe of it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kit_client as client
import pytest
from conftest import HUNG
from fakes import FakeDevice, MiB

OCR, CLAS = client.kit("PaddleOCR"), client.kit("PaddleClas")
needs_clas = pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
needs_ocr = pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
RESNET = "ppcls/configs/ImageNet/ResNet/ResNet50.yaml"
MOBILE = "configs/rec/PP-OCRv5/PP-OCRv5_mobile_rec.yml"
# ResNet50 at 32 px, 10 classes, batch 32, no evaluation (estimate does not estimate it)
SMALL_RESNET = ["DataLoader.Train.dataset.transform_ops.1.RandCropImage.size=32", "Arch.class_num=10",
                "DataLoader.Train.sampler.batch_size=32", "Global.eval_during_train=False"]


def options(pairs: list[str]) -> list[str]:
    return [part for pair in pairs for part in ("-O", pair)]


@needs_clas
def test_paddleclas_estimate_takes_the_overrides_and_says_the_best_as_the_kits_keys(fake_cli):
    cli, backend = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=MiB))
    code, out, err = cli("estimate", CLAS / RESNET, "--card", "1GiB", *options(SMALL_RESNET), "--json")
    assert code == 0, err
    assert {tuple(job.model["options"]) for job in backend.jobs} == {tuple(SMALL_RESNET)}
    report = json.loads(out)
    assert report["best"]["precision"] == "fp16-o2" and report["best"]["micro_batch"] == 32  # the config's batch
    # the kit reads -o values as Python literals: True, not YAML's true
    assert report["kit_options"] == ["DataLoader.Train.sampler.batch_size=32", "AMP.use_amp=True", "AMP.level=O2"]
    said = " ".join(err.split())
    assert ("as the kit's overrides (the evaluation batch is not estimated): -o "
            "DataLoader.Train.sampler.batch_size=32 -o AMP.use_amp=True -o AMP.level=O2") in said


@needs_clas
@pytest.mark.parametrize(("card", "best"), [("70MiB", 16), ("45MiB", None)])
def test_paddleclas_estimate_keeps_the_batchnorm_floor_as_probe_does(fake_cli, card, best):
    """A BatchNorm model: no predicted best below 16 samples per micro-batch, however small the card (the probes
    report the model's BatchNorm layers, as the search's floor reads them)."""
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=4 * MiB, batchnorm_layers=53))
    code, out, err = cli("estimate", CLAS / RESNET, "--card", card, *options(SMALL_RESNET), "--json")
    assert code == (0 if best else 1), err  # nothing predicted to fit: as probe's nothing fits
    report = json.loads(out)
    fitting = [row["micro_batch"] for row in report["rows"] if row["fits"] and row["precision"] == "fp16-o2"]
    assert min(fitting) < 16  # smaller micro-batches are predicted to fit ...
    assert report["least_micro_batch"] == 16  # ... and not chosen
    assert (report["best"] or {}).get("micro_batch") == best
    assert "no micro-batch below 16 is chosen, as `vramtune probe` chooses none: the model has 53 BatchNorm " \
           "layers" in " ".join(err.split())


@needs_ocr
def test_paddleocr_estimate_below_the_configs_batch_says_the_learning_rate(fake_cli):
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, out, err = cli("estimate", OCR / MOBILE, "--card", "40MiB", "-O", "Train.sampler.first_bs=16", "--json")
    assert code == 0, err
    report = json.loads(out)
    best = report["best"]
    # every batch up to the target, not only its divisors (8 before): the kit cannot accumulate
    assert (best["precision"], best["micro_batch"], best["accumulation"]) == ("bf16-o2", 15, 1)
    # the kit reads -o values as YAML; the batch it trains is 15, and the learning rate follows
    assert report["kit_options"] == ["Train.sampler.first_bs=15", "Global.use_amp=true", "Global.amp_level=O2",
                                     "Global.amp_dtype=bfloat16"]
    said = " ".join(err.split())
    assert "predicted best: bf16-o2, batch 15; peak" in said
    assert "the effective batch falls from 16 to 15 per card" in said and "x0.938 here" in said


@needs_clas
def test_a_bad_override_is_bad_input(fake_cli):
    cli, backend = fake_cli(FakeDevice())
    code, out, err = cli("estimate", CLAS / RESNET, "--card", "24GiB", "-O", "Global.epochs")
    assert (code, out, backend.jobs) == (2, "", []) and "must be Key=value" in err
    code, out, err = cli("estimate", CLAS / RESNET, "--card", "24GiB", "-O", "DataLoader.Train.sampler.batch_size=0")
    assert (code, out, backend.jobs) == (2, "", []) and "must be a positive integer, got 0" in err


def run_vramtune(*arguments: str, cwd: Path) -> dict:
    """A vramtune command's --json answer, run as a user runs it (in the kit's checkout)."""
    done = subprocess.run([sys.executable, "-m", "vramtune", *arguments, "--json"], cwd=cwd, capture_output=True,
                          text=True, timeout=HUNG, env={**client.child_env(), "VRAMTUNE_CACHE": str(cwd / "cache")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.paddle
@needs_clas
@pytest.mark.skipif(not client.has_requirements("PaddleClas"), reason=client.missing_reason("PaddleClas"))
@pytest.mark.slow(30)
def test_paddleclas_estimate_of_the_configs_batch_is_what_a_probe_measures(tmp_path):
    """ResNet50 32 px, batch 32: the kit's model counted lazily (every parameter, BatchNorm's statistics too), CPU
    probes at full depth (a kit model has no depth to reduce), fp32 at the config's batch against a real probe."""
    config = str(CLAS / RESNET)
    estimate = run_vramtune("estimate", config, "--card", "24GiB", *options(SMALL_RESNET), cwd=tmp_path)
    assert estimate["counts"]["params"] == 23_581_642 and estimate["counts"]["trainable"] == 23_528_522
    assert estimate["depth_probed"] == "full depth"
    predicted = next(row for row in estimate["rows"] if (row["precision"], row["micro_batch"]) == ("fp32", 32))
    assert predicted["optimizer_state"] == 4 * 23_528_522  # Momentum: one velocity per trained weight
    measured = run_vramtune("measure", config, *options(SMALL_RESNET), "--device", "cpu", "--budget", "4GiB",
                            "-m", "32", cwd=tmp_path)
    assert predicted["peak_bytes"] == pytest.approx(measured["peak_bytes"], rel=0.03)
    assert estimate["kit_options"] == ["DataLoader.Train.sampler.batch_size=32", "AMP.use_amp=True", "AMP.level=O2"]


@pytest.mark.paddle
@needs_ocr
@pytest.mark.skipif(not client.has_requirements("PaddleOCR"), reason=client.missing_reason("PaddleOCR"))
@pytest.mark.slow(60)
def test_paddleocr_estimate_probes_every_scale_and_predicts_what_a_probe_measures(tmp_path):
    """PP-OCRv5 mobile at first_bs 2 (scales 32/48/64 px high at 2/1/1) with en_dict's 95 characters (the shipped
    18,383 double its parameters and the probes' time): the probes train every scale (one step would see one, and the
    estimate fell 15% short at first_bs 4); fp32 at the config's batch against a real probe."""
    config = str(OCR / MOBILE)
    shape = ["Train.sampler.first_bs=2", "Global.eval_batch_step=0",
             "Global.character_dict_path=ppocr/utils/en_dict.txt"]
    estimate = run_vramtune("estimate", config, "--card", "24GiB", *options(shape), cwd=tmp_path)
    assert estimate["counts"]["params"] == 15_267_997  # the heads sized by en_dict's 95 characters
    assert estimate["counts"]["trainable"] == 15_197_773
    predicted = next(row for row in estimate["rows"] if (row["precision"], row["micro_batch"]) == ("fp32", 2))
    measured = run_vramtune("measure", config, *options(shape), "--device", "cpu", "--budget", "4GiB", "-m", "2",
                            cwd=tmp_path)
    assert predicted["peak_bytes"] == pytest.approx(measured["peak_bytes"], rel=0.03)
    assert estimate["kit_options"] == ["Train.sampler.first_bs=2", "Global.use_amp=true", "Global.amp_level=O2",
                                       "Global.amp_dtype=bfloat16"]
