"""PaddleClas configs as specs: read Paddle-free, probed with the kit's own model and loss, written back, and the
kit's own tools/train.py run on the tuned file peaking where vramtune's probe did."""
from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import kit_client as client
import pytest
import yaml
from band import log_band
from conftest import HUNG
from fakes import FakeDevice, MiB

from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.dialects.kits.paddleclas import KIT
from vramtune.dialects.recorded import budget_line
from vramtune.spec import SpecError, load_spec

CHECKOUT = client.kit("PaddleClas")
needs_kit = pytest.mark.skipif(CHECKOUT is None, reason=f"no PaddleClas checkout in {client.KITS}")
RESNET = "ppcls/configs/ImageNet/ResNet/ResNet50.yaml"
VIT = "ppcls/configs/ImageNet/VisionTransformer/ViT_base_patch16_224.yaml"


@needs_kit
def test_a_config_is_a_spec_with_its_own_batch():
    spec = load_spec(CHECKOUT / RESNET, {"kit.options": ["Global.update_freq=2"]})
    assert spec.source == "paddleclas"
    assert spec.train.target_batch == 64 * 2
    assert spec.train.optimizer == "momentum"
    assert spec.settings["evaluation"].batch == 64
    assert spec.model.checkout == str(CHECKOUT.resolve())
    assert spec.model.probe_options == ["Arch.pretrained=False"]  # weights are never downloaded


@needs_kit
def test_overrides_set_the_batch_and_bad_ones_are_one_message():
    spec = load_spec(CHECKOUT / VIT, {"kit.options": ["DataLoader.Train.sampler.batch_size=8",
                                                      "Global.eval_during_train=False"]})
    assert spec.train.target_batch == 8 and spec.settings["evaluation"] is None
    with pytest.raises(SpecError, match="must be Key=value"):
        load_spec(CHECKOUT / VIT, {"kit.options": ["Global.epochs"]})


RECOGNITION = "ppcls/configs/GeneralRecognition/GeneralRecognition_PPLCNet_x2_5.yaml"  # RecModel, ArcMargin head


@needs_kit
def test_no_pretrained_weights_anywhere_in_the_model():
    spec = load_spec(CHECKOUT / RECOGNITION, {"kit.options": ["Global.eval_during_train=False"]})
    assert spec.model.probe_options == ["Arch.Backbone.pretrained=False"]


@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleClas"), reason=client.missing_reason("PaddleClas"))
def test_a_recognition_model_is_probed_as_the_engine_runs_it(tmp_path):
    """A RecModel's head takes the labels (the engine's is_rec: model(images, labels)); its backbone's pretrained
    weights are not downloaded."""
    done = vramtune("measure", str(CHECKOUT / RECOGNITION), "--device", "cpu", "--budget", "4GiB", "-m", "4", "--json",
                    "-OArch.Head.class_num=100", "-ODataLoader.Train.dataset.transform_ops.1.RandCropImage.size=64",
                    "-ODataLoader.Train.sampler.batch_size=4", "-OGlobal.eval_during_train=False", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout)
    assert measured["status"] == "fits" and measured["peak_bytes"] > 3 * measured["weight_bytes"]


@needs_kit
@pytest.mark.parametrize(("config", "options", "said"), [
    (RESNET, ["Global.use_dali=True"], "Global.use_dali: DALI decodes and augments on the card"),
    (RECOGNITION, [], "Global.eval_mode retrieval: it evaluates with every query and gallery feature kept"),
    ("ppcls/configs/reid/strong_baseline/softmax_triplet_with_center.yaml", ["Global.eval_during_train=False"],
     "Optimizer: a list of optimizers"),
])
def test_what_is_not_measured_is_refused_by_name(config, options, said):
    with pytest.raises(SpecError, match=said):
        load_spec(CHECKOUT / config, {"kit.options": options})


def test_amp_with_evaluation_writes_the_evaluation_under_amp_as_measured():
    """The probe evaluates under the training's AMP; PaddleClas evaluates in fp32 unless AMP.use_fp16_test."""
    raw = {"AMP": {"use_amp": False, "level": "O1", "use_fp16_test": False},
           "DataLoader": {"Train": {"sampler": {"batch_size": 64}}}}
    strategy = Strategy(micro_batch=32, accumulation=2, precision="fp16")
    evaluated, _ = KIT.changes(raw, Tuned(strategy=strategy, facts={"eval_batch": 48}), 64)
    assert evaluated == {"DataLoader.Train.sampler.batch_size": 32, "Global.update_freq": 2,
                         "DataLoader.Eval.sampler.batch_size": 48, "AMP.use_amp": True, "AMP.level": "O1",
                         "AMP.use_fp16_test": True}
    not_evaluated, _ = KIT.changes(raw, Tuned(strategy=strategy), 64)
    assert "AMP.use_fp16_test" not in not_evaluated


@needs_kit
def test_a_config_outside_a_checkout_is_refused(tmp_path):
    copy = tmp_path / "ResNet50.yaml"
    shutil.copy(CHECKOUT / RESNET, copy)
    with pytest.raises(SpecError, match="outside a paddleclas checkout"):
        load_spec(copy)


def diff(before: Path, after: Path) -> list[str]:
    """The changed lines, in order, without context."""
    lines = difflib.unified_diff(before.read_text().splitlines(), after.read_text().splitlines(), n=0, lineterm="")
    return [line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def vramtune(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramtune", *arguments], cwd=cwd, capture_output=True, text=True,
                          timeout=HUNG, env={**client.child_env(), "VRAMTUNE_CACHE": str(cwd / "cache")})


def clas_dataset(folder: Path, train: int, evaluate: int) -> list[str]:
    """ImageNetDataset label files over random JPEGs; the -o options that train and evaluate on them, once."""
    names = client.write_images(folder / "images", max(train, evaluate), 72, 72)
    (folder / "train.txt").write_text("".join(f"images/{n} {i % 10}\n" for i, n in enumerate(names[:train])))
    (folder / "val.txt").write_text("".join(f"images/{n} {i % 10}\n" for i, n in enumerate(names[:evaluate])))
    options = ["Global.device=cpu", "Global.epochs=1", f"Global.output_dir={folder}/out", "Global.save_interval=100"]
    for part, labels in (("Train", "train.txt"), ("Eval", "val.txt")):
        options += [f"DataLoader.{part}.dataset.image_root={folder}/",
                    f"DataLoader.{part}.dataset.cls_label_path={folder}/{labels}", *loader(part)]
    return options


def loader(part: str) -> list[str]:
    """A loader without workers: its thread reads ahead in the training process (5 batches), which the probe holds
    too when given the same keys."""
    return [f"DataLoader.{part}.loader.num_workers=0", f"DataLoader.{part}.loader.use_shared_memory=False"]


@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleClas"), reason=client.missing_reason("PaddleClas"))
@pytest.mark.slow(60)
def test_the_kits_own_train_peaks_where_the_probe_did(tmp_path):
    """ResNet50 at 32 px, 10 classes, batch 32 (the BatchNorm floor is 16): a budget between m=16 and m=32."""
    shape = ["DataLoader.Train.dataset.transform_ops.1.RandCropImage.size=32", "Arch.class_num=10",
             "DataLoader.Train.sampler.batch_size=32", "DataLoader.Eval.sampler.batch_size=32",
             "DataLoader.Eval.dataset.transform_ops.1.ResizeImage.resize_short=36",
             "DataLoader.Eval.dataset.transform_ops.2.CropImage.size=32"]
    flags = [f"-O{option}" for option in shape]
    out = tmp_path / "ResNet50.tuned.yaml"
    done = vramtune("apply", str(CHECKOUT / RESNET), "--device", "cpu", "--budget", "340MiB", "-o", str(out),
                    "--json", *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads(done.stdout)["exported"]
    assert (exported["micro_batch"], exported["accumulation"]) == (16, 2)
    tuned = yaml.safe_load(out.read_text())
    assert tuned["DataLoader"]["Train"]["sampler"]["batch_size"] == 16 and tuned["Global"]["update_freq"] == 2
    untuned = [option for option in shape if ".sampler.batch_size=" not in option]  # check's -O: the rest
    assert diff(CHECKOUT / RESNET, out) == [
        "+" + budget_line(340 * MiB, untuned).rstrip("\n"),
        "+  update_freq: 2", "-      batch_size: 64", "+      batch_size: 16", "-      batch_size: 64",
        "+      batch_size: 32"]

    eval_batch = exported["eval_batch"]
    options = clas_dataset(tmp_path / "data", train=16 * 2 * 2, evaluate=eval_batch)
    peak, _ = client.run_train(CHECKOUT, out, [*shape[:2], *shape[4:], "Arch.pretrained=False", *options], tmp_path)
    probed = max(exported["peak_bytes"], exported["eval_peaks"][str(eval_batch)])
    log_band(probed, peak)
    assert abs(peak - probed) / probed < 0.05, (peak, probed)


@needs_kit
def test_the_per_card_batch_times_the_devices_is_the_target():
    spec = load_spec(CHECKOUT / RESNET, {"devices": 4})
    assert (spec.devices, spec.train.target_batch) == (4, 64 * 4)


RESNET18 = "ppcls/configs/ImageNet/ResNet/ResNet18.yaml"
# ResNet18 at 64 px, 10 classes, batch 16 (the BatchNorm floor: the one micro-batch the search can choose), eval 16
SMALL_RESNET18 = ["DataLoader.Train.dataset.transform_ops.1.RandCropImage.size=64", "Arch.class_num=10",
                  "DataLoader.Train.sampler.batch_size=16", "DataLoader.Eval.sampler.batch_size=16",
                  "DataLoader.Eval.dataset.transform_ops.1.ResizeImage.resize_short=73",
                  "DataLoader.Eval.dataset.transform_ops.2.CropImage.size=64"]
EMA = "EMA.decay=0.9999"  # the kit's ExponentialMovingAverage: a copy of the weights (ppcls/engine/engine.py)


@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleClas"), reason=client.missing_reason("PaddleClas"))
@pytest.mark.slow(50)
def test_ema_is_measured_and_the_kits_own_train_agrees(tmp_path):
    """EMA's copy of the weights is in the probe's peak: the weights' bytes above the same config without it, in
    vramtune's probe and in the kit's own tools/train.py on the exported file alike. 8 batches an epoch: the kit's
    DataLoader holds all it reads ahead (5 batches without workers, 2.3% of the peak here) at every step from the
    second (the first with the optimizer's state and the EMA's copy) while 5 are left, as on a real dataset, and the
    probe holds them too."""
    flags = [f"-O{option}" for option in [*SMALL_RESNET18, *loader("Train")]]
    without = vramtune("measure", str(CHECKOUT / RESNET18), "--device", "cpu", "--budget", "4GiB", "-m", "16",
                       "--json", *flags, "-OGlobal.eval_during_train=False", cwd=tmp_path)
    assert without.returncode == 0, without.stderr[-3000:]
    out = tmp_path / "ResNet18.tuned.yaml"
    done = vramtune("apply", str(CHECKOUT / RESNET18), "--device", "cpu", "--budget", "2GiB", "-o", str(out),
                    "--json", *flags, f"-O{EMA}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    exported, plain = json.loads(done.stdout)["exported"], json.loads(without.stdout)
    assert (exported["micro_batch"], exported["accumulation"], exported["eval_batch"]) == (16, 1, 16)
    weights = plain["weight_bytes"]  # ResNet18's 11.2 M weights and BatchNorm statistics (Paddle parameters both)
    assert exported["peak_bytes"] - plain["peak_bytes"] == pytest.approx(weights, rel=0.01)

    options = clas_dataset(tmp_path / "data", train=16 * 8, evaluate=16)
    kit_options = [*SMALL_RESNET18[:2], *SMALL_RESNET18[4:], "Arch.pretrained=False", *options]
    with_ema, _ = client.run_train(CHECKOUT, out, [*kit_options, EMA], tmp_path)
    without_ema, _ = client.run_train(CHECKOUT, out, kit_options, tmp_path)
    probed = max(exported["peak_bytes"], exported["eval_peaks"]["16"])
    log_band(probed, with_ema)
    assert with_ema == pytest.approx(probed, rel=0.005)
    assert with_ema - without_ema == pytest.approx(weights, rel=0.05)


@needs_kit
def test_the_reports_words_are_said_in_the_kits_keys(fake_cli):
    """The probe table's m, k and r, and the chosen line's micro-batch and accumulation, as PaddleClas calls them."""
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("probe", CHECKOUT / VIT, "--device", "cpu", "--budget", "35MiB",
                          "-O", "DataLoader.Train.sampler.batch_size=8", "-O", "Global.eval_during_train=False")
    assert code == 0, stderr
    assert ("note: in PaddleClas' keys: m (the micro-batch) is DataLoader.Train.sampler.batch_size, k (accumulation) "
            "Global.update_freq; r=0: no block re-run in backward (PaddleClas has no key for it; never searched)"
            in " ".join(stderr.split()))
