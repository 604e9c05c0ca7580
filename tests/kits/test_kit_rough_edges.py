"""What a new user hit on the kits' shipped configs (issue 40), each held to its exact words and exit code over a fake
device (no Paddle)."""
from __future__ import annotations

import json

import kit_client as client
import pytest
from fakes import FakeDevice, MiB

OCR, CLAS, SEG, DET = (client.kit(name) for name in ("PaddleOCR", "PaddleClas", "PaddleSeg", "PaddleDetection"))
OCR_REC = "configs/rec/PP-OCRv4/PP-OCRv4_mobile_rec.yml"
LITESEG = "configs/quick_start/pp_liteseg_optic_disc_512x512_1k.yml"
PPLCNET = "ppcls/configs/ImageNet/PPLCNet/PPLCNet_x1_0.yaml"


@pytest.mark.skipif(SEG is None, reason=f"no PaddleSeg checkout in {client.KITS}")
def test_measure_on_a_cpu_needs_no_budget_to_measure(fake_cli):
    """Before: exit 2, "budget: is required on cpu (a size like 512MiB, or --budget)"."""
    cli, _ = fake_cli(FakeDevice())
    code, out, err = cli("measure", SEG / LITESEG, "--device", "cpu", "--json")
    assert code == 0, err
    assert err.splitlines()[-7:] == [
        "note: no budget given on cpu: measured, not judged (--budget B judges it)",
        "note: the file's strategy: fp32 m=4 k=1 r=0", "fp32 m=4 k=1 r=0: measured", "  peak 28.0 MiB allocated",
        "  0.050s per optimizer step, 80.0 samples/s, loss 1.0", "  repeated blocks found: 4",
        "  on fake cpu, paddle 0.0-fake"]
    assert json.loads(out)["budget_bytes"] is None
    code, _, err = cli("measure", SEG / LITESEG, "--device", "cpu", "--budget", "20MiB")
    assert code == 1 and "fp32 m=4 k=1 r=0: over_budget\n  peak 28.0 MiB allocated (budget 20.0 MiB)\n" in err


@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
def test_measure_and_check_show_the_evaluation_peak(fake_cli):
    """Before: only the training peak; the evaluation's (here 60.0 MiB of a 60.8 MiB limit) only in --json."""
    cli, _ = fake_cli(FakeDevice(eval_per_sample=5 * MiB))
    evaluation = ("  evaluation at batch 8 (lowered from 16: larger ones do not fit): peak 60.0 MiB with the training "
                  "state resident; keeps nothing on the device from step to step\n")
    code, _, err = cli("measure", OCR / OCR_REC, "--device", "cpu", "--budget", "64MiB", "-m", "4",
                       "-O", "Eval.loader.batch_size_per_card=16")
    assert code == 0 and evaluation in err, err
    code, _, err = cli("check", OCR / OCR_REC, "--device", "cpu", "--budget", "64MiB",
                       "-O", "Train.sampler.first_bs=4", "-O", "Eval.loader.batch_size_per_card=16")
    assert code == 0 and evaluation in err and err.endswith("check: pass\n"), err


OCRNET = "configs/ocrnet/ocrnet_hrnetw18_cityscapes_1024x512_160k.yml"


@pytest.mark.skipif(SEG is None, reason=f"no PaddleSeg checkout in {client.KITS}")
def test_a_probe_that_times_out_is_no_verdict_on_memory_and_its_timeout_can_be_raised(fake_cli, tmp_path):
    """Before: "nothing fits 2.6 GiB ... would fit with: a shorter sequence / smaller images, or a smaller model"
    from no measurement at all (exit 1), and no way to raise the 300 s."""
    cli, _ = fake_cli(FakeDevice(probe_seconds=400))
    code, out, err = cli("probe", SEG / OCRNET, "--device", "cpu", "--budget", "2800MiB")
    assert code == 1, err
    assert err.splitlines()[-3:-1] == [
        "nothing measured at target batch 2: 2 probe(s) timed out, none measured a peak (no verdict on memory).",
        "  would measure with: a longer probe timeout: 2 probe(s) stopped after 300s, before any measured a peak: "
        "raise probe.timeout (--probe-timeout SECONDS)"]
    assert "would fit with" not in err and "closest" not in err
    code, _, err = cli("apply", SEG / OCRNET, "--device", "cpu", "--budget", "2800MiB", "-o", tmp_path / "x.yml")
    assert (code, err.splitlines()[-1]) == (1, (
        "error: nothing measured for ocrnet_hrnetw18_cityscapes_1024x512_160k: the probes timed out before any "
        "measured a peak; raise --probe-timeout (now 300s)"))
    code, out, err = cli("probe", SEG / OCRNET, "--device", "cpu", "--budget", "2800MiB", "--probe-timeout", "900",
                         "--json")
    assert code == 0, err  # the saved timeout (after 300 s) is probed again with the longer one
    assert json.loads(out)["chosen"]["micro_batch"] == 2 and json.loads(out)["reused"] == 0
    code, _, err = cli("measure", SEG / OCRNET, "--device", "cpu", "--probe-timeout", "100")
    assert code == 1 and "fp32 m=2 k=1 r=0: timeout\n  no result after 100s;" in err


PPYOLOE = "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml"
ON_A_CPU = [  # before: the same command without what follows the file; it stopped with "The device should not be 'gpu'"
    ("PaddleClas", PPLCNET, "64MiB", "-c {out} -o Global.device=cpu", None),
    ("PaddleOCR", OCR_REC, "64MiB", "-c {out} -o Global.epoch_num=1 Global.use_gpu=False", None),
    ("PaddleDetection", PPYOLOE, "30MiB", "-c {out} -o epoch=1 use_gpu=false",
     "the kit downloads pretrain_weights before it trains (the probes built random weights: the same bytes); offline, "
     "add -o pretrain_weights=null"),
    ("PaddleSeg", OCRNET, "26MiB", "--config {out} --device cpu --opts iters=10",
     "the kit downloads model.backbone.pretrained before it trains (the probes built random weights: the same "
     "bytes); offline, add --opts model.backbone.pretrained=None"),
]


@pytest.mark.parametrize(("kit", "config", "budget", "command", "offline"), ON_A_CPU, ids=[kit for kit, *_ in ON_A_CPU])
def test_the_training_command_apply_prints_trains_where_the_probes_ran(fake_cli, tmp_path, kit, config, budget,
                                                                        command, offline):
    """On a CPU the kit's tools/train.py defaults to a GPU: the command says the kit's CPU switch (PaddleSeg: its flag,
    and PYTHONPATH=. since its tools/train.py does not put the checkout on sys.path); the weights the probes left out
    are named with the override that trains without them (offline)."""
    checkout = client.kit(kit)
    if checkout is None:
        pytest.skip(f"no {kit} checkout in {client.KITS}")
    option = {"PaddleOCR": "Global.epoch_num=1", "PaddleDetection": "epoch=1", "PaddleSeg": "iters=10"}.get(kit)
    out = tmp_path / "tuned.yml"
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("apply", checkout / config, "--device", "cpu", "--budget", budget, "-o", out,
                       *(["-O", option] if option else []))
    assert code == 0, err
    lines = [line.removeprefix("warning: ") for line in err.splitlines()]
    environment = "PYTHONPATH=. " if kit == "PaddleSeg" else ""
    said = f"train the tuned file with the kit: cd {checkout.resolve()} && {environment}python tools/train.py " \
           + command.format(out=out.resolve())
    assert said in lines, err
    assert (offline in lines) if offline else not any("downloads" in line for line in lines), err
    gpu, _ = fake_cli(FakeDevice(kind="gpu", name="fake gpu", card_bytes=int(budget.removesuffix("MiB")) * MiB))
    code, _, err = gpu("apply", checkout / config, "-o", tmp_path / "gpu.yml", "--force",
                       *(["-O", option] if option else []))
    assert code == 0 and not any(switch in " ".join(err.split()) for switch in ("cpu", "use_gpu")), err


@pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
def test_the_tuned_file_keeps_the_configs_suffix(fake_cli, tmp_path):
    """Before: PPLCNet_x1_0.tuned.yml for PPLCNet_x1_0.yaml."""
    checkout, mine = client.user_clas_checkout(tmp_path, CLAS, "lcnet.yaml", (CLAS / PPLCNET).read_text())
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("apply", mine, "--device", "cpu", "--budget", "64MiB")
    assert code == 0 and err.endswith(f"wrote {checkout / 'lcnet.tuned.yaml'}\n"), err
    assert (checkout / "lcnet.tuned.yaml").is_file()


@pytest.mark.skipif(DET is None, reason=f"no PaddleDetection checkout in {client.KITS}")
def test_a_kit_that_cannot_accumulate_is_tried_at_every_batch_that_may_fit_and_says_the_batch_it_trains(fake_cli,
                                                                                                         tmp_path):
    """Before: PP-YOLOE probed m=8 and m=2 (the divisors of 8) and wrote batch 2 where 3 fits; the chosen line said
    "micro-batch 2 x accumulation 4 = 8" of a batch of 2; the floor note cited search.min_micro_batch."""
    cli, backend = fake_cli(FakeDevice(batchnorm_layers=40))
    out = tmp_path / "det.yml"
    code, _, err = cli("apply", DET / PPYOLOE, "--device", "cpu", "--budget", "28MiB", "-o", out)
    assert code == 0, err
    assert [job.strategy["micro_batch"] for job in backend.jobs] == [8, 3]  # 4 predicted over: not probed
    lines = err.splitlines()
    assert ("note: micro-batch floor 2 applied (the model has 40 BatchNorm layers, whose statistics over fewer samples "
            "are noisy); nothing below it probed") not in lines  # the search did not come down to the floor
    assert ("chosen: fp32, batch 3, below the target 8 (this loop cannot accumulate: it trains 3 samples a step); "
            "peak 26.0 MiB of 26.6 MiB (98%; budget 28.0 MiB less 5% headroom), 75.0 samples/s") in lines
    assert ("warning: PaddleDetection's trainer cannot accumulate gradients: the batch per card falls from 8 to 3. Its "
            "configs set LearningRate.base_lr for their total batch: scale it with the batch (linear scaling: x0.375 "
            "here)") in lines
    assert out.read_text().splitlines()[-1] == "TrainReader: {batch_size: 3}"


@pytest.mark.skipif(SEG is None, reason=f"no PaddleSeg checkout in {client.KITS}")
def test_paddlesegs_words_its_floor_its_learning_rate_and_estimates_base_files(fake_cli, tmp_path):
    """Before: "micro-batch floor 2 applied (search.min_micro_batch)"; the learning-rate warning quoting PP-LiteSeg's
    "batch_size: 4  # total: 4*4" for every config; `estimate` warning about the `_base_` paths of a file it does not
    write."""
    cli, _ = fake_cli(FakeDevice(batchnorm_layers=30))
    code, _, err = cli("apply", SEG / OCRNET, "--device", "cpu", "--budget", "30MiB", "-O", "batch_size=8",
                       "-o", tmp_path / "seg.yml")
    assert code == 0, err
    lines = err.splitlines()
    assert ("warning: PaddleSeg cannot accumulate gradients: the batch per card falls from 8 to 4. Its configs set "
            "lr_scheduler.learning_rate for their total batch (batch_size x cards): scale it with the batch (linear "
            "scaling: x0.5 here)") in lines
    code, _, err = cli("probe", SEG / OCRNET, "--device", "cpu", "--budget", "23MiB", "-O", "batch_size=8")
    assert code == 1 and ("note: micro-batch floor 2 applied (the model has 30 BatchNorm layers, whose statistics "
                          "over fewer samples are noisy); nothing below it probed") in err.splitlines(), err
    code, _, err = cli("estimate", SEG / OCRNET, "--card", "26MiB", "-O", "batch_size=8")
    assert code == 0 and "_base_" not in err, err
    assert "predicted best: fp32, batch 3; peak 22.7 MiB of 24.7 MiB" in err.splitlines()
