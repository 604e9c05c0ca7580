"""PaddleOCR text detection configs as specs: what the probe makes of them (the kit's own training targets at the
crop, the evaluation at the resolution the config states: its image_shape, else the resize of the largest image of
the eval set, else an assumption said), what it refuses by name, and the kit's own tools/train.py on the tuned file,
with evaluation, peaking where the probe did."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import kit_client as client
import pytest
import yaml
from fakes import FakeDevice, MiB

from vramtune.dialects.kits.paddleocr_det import resized
from vramtune.spec import SpecError, load_spec

CHECKOUT = client.kit("PaddleOCR")
needs_kit = pytest.mark.skipif(CHECKOUT is None, reason=f"no PaddleOCR checkout in {client.KITS}")
needs_requirements = pytest.mark.skipif(not client.has_requirements("PaddleOCR"),
                                        reason=client.missing_reason("PaddleOCR"))
V4 = "configs/det/PP-OCRv4/PP-OCRv4_mobile_det.yml"  # PPLCNetV3 + RSEFPN + DBHead; DetResizeForTest's defaults
MV3 = "configs/det/det_mv3_db.yml"  # MobileNetV3 + DBFPN + DBHead; evaluation at image_shape [736, 1280]
EVAL_IMAGES = [(150, 220)] + [(100, 300)] * 7  # the first the largest image, the others the largest to evaluate


@pytest.mark.parametrize(("arguments", "image", "expected"), [
    (None, (720, 1280), (720, 1280)),  # no DetResizeForTest: full resolution
    ({}, (720, 1280), (736, 1312)),  # its defaults: limit_side_len 736, limit_type min (the shorter side at least)
    ({"limit_side_len": 192}, (100, 300), (192, 576)),
    ({"limit_side_len": 192}, (150, 220), (192, 288)),
    ({"limit_side_len": 960, "limit_type": "max"}, (720, 1280), (544, 960)),
    ({"image_shape": [736, 1280]}, (100, 300), (736, 1280)),
    ({"image_shape": [736, 736], "keep_ratio": True}, (720, 1280), (736, 1312)),
    ({"resize_long": 736}, (720, 1280), (512, 768)),
    ({}, (100, 4000), (96, 4000)),  # enlarged past max_side_limit (4000): capped
])
def test_the_evaluation_resolution_is_detresizefortests(arguments, image, expected):
    assert resized(arguments, *image) == expected


def user_checkout(tmp_path: Path, config: str, crop: int, train: int, limit: int | None = None) -> Path:
    """A user's PaddleOCR checkout (the kit's code linked) holding their own det config, trained at `crop` px, and a
    tiny dataset beside it (`train` images, and EVAL_IMAGES to evaluate), found from the checkout as tools/train.py
    finds it; `limit`: DetResizeForTest's limit_side_len where the config gives none."""
    checkout = tmp_path / "PaddleOCR"
    checkout.mkdir()
    for part in ("ppocr", "tools"):
        (checkout / part).symlink_to(CHECKOUT / part)
    write_det_set(checkout, "train", [(crop + 32, crop + 32)] * train)
    write_det_set(checkout, "val", EVAL_IMAGES)
    mine = yaml.safe_load((CHECKOUT / config).read_text())
    for op in mine["Train"]["dataset"]["transforms"]:
        if "EastRandomCropData" in op:
            op["EastRandomCropData"]["size"] = [crop, crop]
    for op in mine["Eval"]["dataset"]["transforms"]:
        if "DetResizeForTest" in op and not op["DetResizeForTest"] and limit:
            op["DetResizeForTest"] = {"limit_side_len": limit}
    for part in ("train", "val"):
        mine["Train" if part == "train" else "Eval"]["dataset"].update(
            data_dir=f"./train_data/{part}", label_file_list=[f"./train_data/{part}.txt"])
    (checkout / "mine.yml").write_text(yaml.safe_dump(mine, sort_keys=False))
    return checkout


def write_det_set(checkout: Path, part: str, sizes: list[tuple[int, int]]) -> None:
    """Random JPEGs of these (height, width) under train_data/PART/, each with 4 text boxes, and their label file."""
    import cv2
    import numpy as np

    folder = checkout / "train_data" / part
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    lines = []
    for index, (height, width) in enumerate(sizes):
        cv2.imwrite(str(folder / f"img_{index}.jpg"), rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
        boxes = [{"transcription": "text", "points": [[x, y], [x + width // 4, y], [x + width // 4, y + height // 6],
                                                      [x, y + height // 6]]}
                 for x in (width // 20, width // 2) for y in (height // 10, height // 2)]
        lines.append(f"img_{index}.jpg\t{json.dumps(boxes)}\n")
    (checkout / "train_data" / f"{part}.txt").write_text("".join(lines))


@needs_kit
def test_a_detection_config_is_read_with_its_evaluation_at_the_resolution_it_states(tmp_path):
    spec = load_spec(CHECKOUT / V4)
    assert spec.source == "paddleocr" and spec.train.target_batch == 8 and spec.train.optimizer == "adam"
    assert spec.settings["evaluation"].batch == 1 and spec.settings["evaluation"].keep == "nothing"
    assert spec.model.probe_options == ["Global.pretrained_model=null"]  # a URL tools/train.py downloads
    assert spec.warnings == [
        f"{CHECKOUT / V4}: the training set is never read: probes train on a synthetic image cropped to [640, 640] "
        "(EastRandomCropData) with 12 text boxes, the training targets made by the config's own Train transforms",
        f"{CHECKOUT / V4}: evaluation at 736 x 1312 (height x width): DetResizeForTest (limit_side_len 736, limit_type "
        "min: its defaults) of an assumed 1280x720 image (ICDAR2015's): the eval set "
        "(['./train_data/icdar2015/text_localization/test_icdar2015_label.txt']) is not there to read"]
    assert load_spec(CHECKOUT / MV3).warnings[1] == (
        f"{CHECKOUT / MV3}: evaluation at 736 x 1280 (height x width): DetResizeForTest (image_shape [736, 1280]) of "
        "every image")
    checkout = user_checkout(tmp_path, V4, 160, 1, limit=192)
    assert load_spec(checkout / "mine.yml").warnings[1] == (  # 150x220 is larger, 100x300 evaluates larger
        f"{checkout / 'mine.yml'}: evaluation at 192 x 576 (height x width): DetResizeForTest (limit_side_len 192) "
        "of the largest of the eval set's images to evaluate, train_data/val/img_1.jpg (300x100)")


@needs_kit
@pytest.mark.parametrize(("config", "said"), [
    ("configs/det/det_r50_vd_dcn_fce_ctw.yml", "Architecture.algorithm FCE (text detection): its targets "
     "(FCENetTargets) are Fourier coefficients of every text instance, as many as the image holds: the probe makes "
     "the training targets of DB, DB++, EAST, PSE, SAST only in this version"),
    ("configs/det/det_r50_drrg_ctw.yml", "Architecture.algorithm DRRG (text detection): its targets (DRRGTargets) "
     "are a graph of every text component"),
    ("configs/det/det_r18_vd_ct.yml", "Architecture.algorithm CT (text detection): its targets (gt_instance, "
     "gt_kernel_instance) number the text instances the image holds"),
    ("configs/det/PP-OCRv4/PP-OCRv4_det_cml.yml", "Architecture.algorithm Distillation (text detection): a teacher "
     "and students trained together (CombinedLoss, DistillationModel) are not measured in this version: probe the "
     "student's own config (PP-OCRv3_mobile_det.yml, PP-OCRv4_mobile_det.yml, ...), which trains alone"),
])
def test_the_detectors_not_measured_are_refused_by_name_with_what_to_do(fake_cli, config, said):
    """Before: every det config exit 2 with "only recognition models (rec, not distilled) are measured"."""
    with pytest.raises(SpecError, match=re.escape(said)):
        load_spec(CHECKOUT / config)
    cli, backend = fake_cli(FakeDevice())
    code, _, err = cli("probe", CHECKOUT / config, "--budget", "1GiB")
    assert (code, backend.jobs) == (2, []) and said in " ".join(err.split())


@needs_kit
def test_every_shipped_det_config_reads_but_the_refused_ones():
    """The DB, DB++, EAST, PSE and SAST configs the kit ships read as specs; FCE, DRRG, CT and the distilled ones
    are refused (above)."""
    refused = []
    for path in sorted((CHECKOUT / "configs/det").rglob("*.yml")):
        try:
            load_spec(path)
        except SpecError:
            refused.append(path.relative_to(CHECKOUT / "configs/det").as_posix())
    assert refused == ["PP-OCRv3/PP-OCRv3_det_cml.yml", "PP-OCRv3/PP-OCRv3_det_dml.yml", "PP-OCRv4/PP-OCRv4_det_cml.yml",
                       "ch_PP-OCRv2/ch_PP-OCRv2_det_cml.yml", "ch_PP-OCRv2/ch_PP-OCRv2_det_distill.yml",
                       "ch_PP-OCRv2/ch_PP-OCRv2_det_dml.yml", "det_r18_vd_ct.yml", "det_r50_drrg_ctw.yml",
                       "det_r50_vd_dcn_fce_ctw.yml"]


def vramtune(*arguments: str, cwd: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "vramtune", *arguments, "--json"], cwd=cwd, capture_output=True,
                          text=True, timeout=3600, env={**client.child_env(), "VRAMTUNE_CACHE": str(cwd / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# the kit's own run: one epoch, an evaluation at step 8 (of 15), no workers, no download
RUN = ["Global.use_gpu=False", "Global.distributed=False", "Global.epoch_num=1", "Global.print_batch_step=1",
       "Global.save_epoch_step=100", "Global.eval_batch_step=[0,8]", "Global.pretrained_model=null"]
LOADERS = ["Train.loader.num_workers=0", "Eval.loader.num_workers=0"]  # the loaders' threads read 5 batches ahead


@needs_kit
@needs_requirements
@pytest.mark.paddle
@pytest.mark.parametrize(("config", "limit", "target", "budget", "batch"), [
    # training sets the peak: between batch 3 (188.6 MiB) and 4 (233.3 MiB), 3 is written (before: 2, 4's divisor)
    (V4, 192, 4, "215MiB", 3),
    # evaluation sets it: det_mv3_db's own 736 x 1280 (805 MiB with the training state), batch 4 at 149 MiB
    (MV3, None, 4, "1GiB", 4),
], ids=["PP-OCRv4_mobile_det", "det_mv3_db"])
def test_the_kits_own_train_peaks_where_the_probe_did(tmp_path, config, limit, target, budget, batch):
    """The user's own det config at a 160 px crop in their checkout, its eval set beside it: apply, then the kit's
    own tools/train.py on the tuned file (15 batches, evaluated once at step 8) peaks within 1% of the probe's
    larger phase."""
    checkout = user_checkout(tmp_path, config, 160, 15 * batch, limit)
    out = checkout / "mine.tuned.yml"
    answer = vramtune("apply", str(checkout / "mine.yml"), "--device", "cpu", "--budget", budget, "-o", str(out),
                      f"-OTrain.loader.batch_size_per_card={target}", *[f"-O{option}" for option in LOADERS],
                      cwd=tmp_path)
    exported = answer["exported"]
    assert (exported["micro_batch"], exported["eval_batch"]) == (batch, 1)
    assert yaml.safe_load(out.read_text())["Train"]["loader"]["batch_size_per_card"] == batch
    assert any("train the tuned file with the kit:" in warning and "Global.use_gpu=False" in warning
               for warning in answer["warnings"])
    peak, output = client.run_train(checkout, out, [*RUN, f"Global.save_model_dir={tmp_path}/out", *LOADERS],
                                    tmp_path, timeout=3600, one_flag=True)
    assert "eval model" in output
    probed = max(exported["peak_bytes"], exported["eval_peaks"]["1"])
    assert peak == pytest.approx(probed, rel=0.01), (peak, exported["peak_bytes"], exported["eval_peaks"])


@needs_kit
def test_apply_writes_the_detection_batch_and_says_how_to_train_it(fake_cli, tmp_path):
    checkout = user_checkout(tmp_path, V4, 160, 1, limit=192)
    cli, _ = fake_cli(FakeDevice(eval_per_sample=5 * MiB))
    out = checkout / "mine.tuned.yml"
    code, _, err = cli("apply", checkout / "mine.yml", "--device", "cpu", "--budget", "35MiB", "-o", out,
                       "--precision", "fp32")
    assert code == 0, err
    lines = err.splitlines()
    assert any(line.startswith("chosen: fp32, batch 6, below the target 8 (this loop cannot accumulate: it trains 6 "
                               "samples a step); peak 32.0 MiB of 33.2 MiB") for line in lines), err
    assert ("  evaluation at batch 1: peak 25.0 MiB with the training state resident; keeps nothing on the device "
            "from step to step") in lines
    assert f"warning: train the tuned file with the kit: cd {checkout.resolve()} && python tools/train.py -c " \
           f"{out.resolve()} -o Global.use_gpu=False" in lines
    assert ("warning: the kit downloads Global.pretrained_model before it trains (the probes built random weights: "
            "the same bytes); offline, add -o Global.pretrained_model=null") in lines
    assert yaml.safe_load(out.read_text())["Train"]["loader"]["batch_size_per_card"] == 6
