"""PaddleDetection configs as specs: read with the kit's own loader (`_BASE_` files, `-o`) Paddle-free and equal to
ppdet's own `load_config`, written back with only TrainReader.batch_size changed and loaded by ppdet's loader, and
probed with the kit's own PP-YOLOE+ built by `create(cfg.architecture)`."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kit_client as client
import pytest
from band import log_band
from conftest import HUNG
from fakes import FakeDevice, MiB
from test_paddleclas import diff

from vramtune.dialects.kits.paddledetection import read_config
from vramtune.dialects.recorded import budget_line
from vramtune.spec import SpecError, load_spec

CHECKOUT = client.kit("PaddleDetection")
needs_kit = pytest.mark.skipif(CHECKOUT is None, reason=f"no PaddleDetection checkout in {client.KITS}")
REQUIREMENTS = ("cv2", "scipy", "shapely", "pycocotools", "typeguard", "terminaltables", "imgaug")
MISSING = [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]
needs_requirements = pytest.mark.skipif(bool(MISSING), reason=f"PaddleDetection's requirements are not installed "
                                                              f"here (missing {', '.join(MISSING)})")
PPYOLOE = "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml"  # TrainReader.batch_size 8 from its _BASE_ reader
SMALL = "TrainReader.batch_transforms=[{BatchRandomResize: {target_size: [160], keep_ratio: false}}, " \
        "{NormalizeImage: {}}, {Permute: {}}, {PadGT: {}}]"


@needs_kit
def test_a_config_is_read_with_its_base_files():
    spec = load_spec(CHECKOUT / PPYOLOE)
    assert spec.source == "paddledetection" and spec.train.target_batch == 8
    assert spec.train.optimizer == "momentum"  # OptimizerBuilder from _base_/optimizer_80e.yml
    assert spec.model.checkout == str(CHECKOUT.resolve())
    said = " ".join(spec.warnings)
    assert "random 768x768 images (the largest training size) with 20 random boxes each" in said
    assert "pretrain_weights: not downloaded" in said
    assert "AMP is a flag of tools/train.py in PaddleDetection, not a config key: searched in fp32 only" in said
    vit = load_spec(CHECKOUT / "configs/vitdet/ppyoloe_vit_base_csppan_cae_36e_coco.yml")  # its backbone downloads
    assert vit.model.probe_options == ["VisionTransformer.pretrained=null"]
    assert "VisionTransformer.pretrained: not downloaded" in " ".join(vit.warnings)


@needs_kit
def test_overrides_are_the_kits_o_read_as_yaml():
    spec = load_spec(CHECKOUT / PPYOLOE, {"kit.options": ["TrainReader.batch_size=3", SMALL]})
    assert spec.train.target_batch == 3 and spec.model.options == ["TrainReader.batch_size=3", SMALL]
    assert "random 160x160 images" in " ".join(spec.warnings)
    with pytest.raises(SpecError, match=r"TrainReader\.batch_size must be a positive integer, got 0"):
        load_spec(CHECKOUT / PPYOLOE, {"kit.options": ["TrainReader.batch_size=0"]})


REFUSED = [  # before: "architecture YOLOv3: the probe makes the training inputs of PP-YOLOE / PP-YOLOE+ ... only in
    # this version", the word PP-YOLOE's configs use too, no head named, nothing to do instead
    ("faster_rcnn/faster_rcnn_r50_fpn_1x_coco.yml", "architecture FasterRCNN (rpn_head RPNHead, bbox_head BBoxHead): an "
     "R-CNN samples proposals from its RPN per image (as many as its boxes give) and needs im_shape and is_crowd per "
     "image."),
    ("cascade_rcnn/cascade_rcnn_r50_fpn_1x_coco.yml", "architecture CascadeRCNN (rpn_head RPNHead, bbox_head "
     "CascadeHead): an R-CNN samples proposals from its RPN at every stage"),
    ("mask_rcnn/mask_rcnn_r50_fpn_1x_coco.yml", "architecture MaskRCNN (rpn_head RPNHead, bbox_head BBoxHead, mask_head "
     "MaskHead): an R-CNN samples proposals per image, and Mask R-CNN trains on each box's polygon (gt_poly)."),
    ("rtdetr/rtdetr_r18vd_6x_coco.yml", "architecture DETR (transformer RTDETRTransformer, detr_head DINOHead): a DETR "
     "(RT-DETR, DINO, Deformable DETR) matches its queries to each image's boxes (Hungarian matching)"),
    ("yolox/yolox_s_300e_coco.yml", "architecture YOLOX (head YOLOXHead): YOLOX's SimOTA assigns each box as many "
     "anchors as its costs choose."),
    ("yolov3/yolov3_mobilenet_v1_270e_coco.yml", "architecture YOLOv3 (yolo_head YOLOv3Head): YOLOv3's own head (and "
     "PP-YOLO's) trains on Gt2YoloTarget's targets per anchor and scale."),
    ("ppyolo/ppyolo_r50vd_dcn_1x_coco.yml", "architecture YOLOv3 (yolo_head YOLOv3Head): YOLOv3's own head"),
]
INSTEAD = ("The probe makes the training inputs of PP-YOLOE / PP-YOLOE+ (YOLOv3 with yolo_head PPYOLOEHead) and PicoDet "
           "(PicoDet with head PicoHeadV2) only in this version; what you can do: train it with the kit's own "
           "tools/train.py for a few iterations on the card (its log prints max_mem_allocated and max_mem_reserved "
           "every log_iter steps) and lower TrainReader.batch_size until they fit; or probe a PP-YOLOE+ or PicoDet "
           "config at the same image size")


@needs_kit
@pytest.mark.parametrize(("config", "said"), REFUSED, ids=[config.split("/")[0] for config, _ in REFUSED])
def test_a_family_the_probe_does_not_make_is_refused_with_its_heads_and_what_to_do(fake_cli, config, said):
    with pytest.raises(SpecError) as raised:
        load_spec(CHECKOUT / "configs" / config)
    message = str(raised.value)
    assert said in message and message.endswith(INSTEAD), message
    cli, backend = fake_cli(FakeDevice())
    code, _, err = cli("probe", CHECKOUT / "configs" / config, "--budget", "1GiB")
    assert (code, backend.jobs) == (2, []) and said in " ".join(err.split())


@needs_kit
def test_what_the_probe_does_not_make_is_refused_by_name(tmp_path):
    with pytest.raises(SpecError, match="to_static: True: probes train eager"):
        load_spec(CHECKOUT / PPYOLOE, {"kit.options": ["to_static=true"]})
    with pytest.raises(SpecError, match="TrainReader: no fixed-size resize"):
        load_spec(CHECKOUT / PPYOLOE, {"kit.options": ["TrainReader.batch_transforms=[{Permute: {}}]"]})
    copy = tmp_path / "alone.yml"
    copy.write_text((CHECKOUT / PPYOLOE).read_text())
    with pytest.raises(SpecError, match="outside a paddledetection checkout"):
        load_spec(copy)


def checkout_copy(tmp_path: Path, config: str) -> Path:
    """A checkout of the kit's code (symlinks) whose configs are copies, so that apply may write beside them."""
    checkout = tmp_path / "PaddleDetection"
    checkout.mkdir()
    for part in ("ppdet", "tools"):
        (checkout / part).symlink_to(CHECKOUT / part)
    shutil.copytree(CHECKOUT / "configs" / config.split("/")[1], checkout / "configs" / config.split("/")[1])
    shutil.copytree(CHECKOUT / "configs" / "datasets", checkout / "configs" / "datasets")
    shutil.copy(CHECKOUT / "configs" / "runtime.yml", checkout / "configs" / "runtime.yml")
    return checkout / config


@needs_kit
def test_apply_writes_only_the_batch_into_the_users_file(fake_cli, tmp_path):
    """The batch lives in the _BASE_ reader file: apply writes it into the user's own file, which ppdet merges over
    its bases, and never touches the base."""
    config = checkout_copy(tmp_path, PPYOLOE)
    cli, backend = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", config, "--device", "cpu", "--budget", "30MiB", "-O", "epoch=1")
    assert code == 0, stderr
    tuned = config.with_name(config.stem + ".tuned.yml")
    assert diff(config, tuned) == [
        "+# vramtune: tuned for a budget of 30.0 MiB (31457280 bytes); `vramtune check FILE -O epoch=1` "
        "gates it in CI",
        "+TrainReader: {batch_size: 4}"]
    assert backend.jobs[0].model["options"] == ["epoch=1"]
    said = " ".join(stderr.split())
    assert "the batch per card falls from 8 to 4" in said and "x0.5 here" in said
    assert "_BASE_ paths (../datasets/coco_detection.yml, ../runtime.yml" in said
    assert f"cd {config.parents[2].resolve()} && python tools/train.py -c {tuned.resolve()} -o epoch=1" in said
    assert ("note: in PaddleDetection's keys: m (the micro-batch) is TrainReader.batch_size; k only measures a "
            "smaller batch, which its trainer cannot accumulate" in said)
    base = read_config(config.parents[2], config, [])
    assert read_config(config.parents[2], tuned, []) == {**base, "filename": tuned.stem,
                                                         "TrainReader": {**base["TrainReader"], "batch_size": 4}}


@needs_kit
def test_a_reader_override_the_tuned_file_does_not_set_is_still_passed_to_the_kit(fake_cli, tmp_path):
    """The file has no TrainReader: apply writes `TrainReader: {batch_size: N}`, which ppdet merges over its bases key
    by key, so a -O TrainReader.sample_transforms=... given to the probe is not in the file and must reach the kit
    (it was dropped from the training command and the budget comment as "tuned"); TrainReader.batch_size is."""
    config = checkout_copy(tmp_path, PPYOLOE)
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    transforms = "TrainReader.sample_transforms=[{Decode: {}}, {RandomFlip: {}}]"
    code, _, stderr = cli("apply", config, "--device", "cpu", "--budget", "30MiB", "-O", "TrainReader.batch_size=6",
                          "-O", transforms)
    assert code == 0, stderr
    tuned = config.with_name(config.stem + ".tuned.yml")
    assert diff(config, tuned) == ["+" + budget_line(30 * MiB, [transforms]).rstrip("\n"),
                                   "+TrainReader: {batch_size: 4}"]  # 6 and 5 are over 30 MiB (3 when only 6's
    #                                                                   divisors were tried)
    said = " ".join(stderr.split())
    assert "-o TrainReader.batch_size=6: tuned in the file now; do not pass them to the kit again" in said
    assert (f"python tools/train.py -c {tuned.resolve()} -o 'TrainReader.sample_transforms=[{{Decode: {{}}}}, "
            "{RandomFlip: {}}]'") in said


def kit_config(config: Path, options: list[str]) -> dict:
    """The config as tools/train.py reads it with ppdet's own workspace (registered modules' schemas left out: their
    dict items are the config's), in a child with Paddle."""
    script = ("import json, sys\nfrom ppdet.core.workspace import load_config, merge_config\n"
              "from ppdet.utils.cli import ArgsParser\ncfg = load_config(sys.argv[1])\n"
              "merge_config(ArgsParser()._parse_opt(sys.argv[2:]))\n"
              "print('CONFIG', json.dumps({k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items() "
              "if type(v).__name__ != 'SchemaDict' or len(v)}, default=str))")
    done = subprocess.run([sys.executable, "-c", script, str(config), *options], capture_output=True, text=True,
                          timeout=HUNG, env={**client.child_env(), "PYTHONPATH": ":".join(
                              [str(CHECKOUT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("CONFIG ", 1)[1])


@needs_kit
@needs_requirements
@pytest.mark.paddle
def test_the_read_equals_ppdets_own_load_config(tmp_path):
    options = ["TrainReader.batch_size=3", SMALL, "use_ema=false"]
    ours = json.loads(json.dumps(read_config(CHECKOUT, CHECKOUT / PPYOLOE, options), default=str))
    theirs = kit_config(CHECKOUT / PPYOLOE, options)
    assert {key: ours[key] for key in theirs if key in ours} == {key: theirs[key] for key in theirs if key in ours}
    assert set(ours) <= set(theirs) and ours["TrainReader"]["batch_size"] == 3 and ours["use_ema"] is False


@needs_kit
def test_a_batch_in_the_users_reader_is_changed_in_place_and_a_tuned_override_not_passed_again(fake_cli, tmp_path):
    config = checkout_copy(tmp_path, "configs/ppyoloe/voc/ppyoloe_plus_crn_s_30e_voc.yml")
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", config, "--device", "cpu", "--budget", "30MiB", "-O", "TrainReader.batch_size=6",
                          "-O", "epoch=1")
    assert code == 0, stderr
    tuned = config.with_name(config.stem + ".tuned.yml")
    assert diff(config, tuned) == [
        "+# vramtune: tuned for a budget of 30.0 MiB (31457280 bytes); `vramtune check FILE -O epoch=1` "
        "gates it in CI",
        "-  batch_size: 8 # default 8 gpus, total bs = 64",
        "+  batch_size: 4 # default 8 gpus, total bs = 64"]  # 6 and 5 are over 30 MiB (3: 6's divisors only)
    said = " ".join(stderr.split())
    assert "-o TrainReader.batch_size=6: tuned in the file now; do not pass them to the kit again" in said
    assert f"python tools/train.py -c {tuned.resolve()} -o epoch=1" in said and "-o TrainReader.batch_size=6 " not in said


def coco_dataset(folder: Path, count: int, side: int, boxes: int) -> list[str]:
    """A COCO dataset of random JPEGs, each with `boxes` boxes (the probe's count, so that PadGT pads to it); the -o
    overrides that train on it."""
    names = client.write_images(folder / "images", count, side, side)
    images = [{"id": index + 1, "file_name": name, "height": side, "width": side} for index, name in enumerate(names)]
    annotations = [{"id": len(images) * box + image["id"], "image_id": image["id"], "category_id": 1 + box % 80,
                    "bbox": [4 * box, 3 * box, side // 3, side // 4], "area": side * side / 12, "iscrowd": 0}
                   for image in images for box in range(boxes)]
    categories = [{"id": index + 1, "name": f"class{index}"} for index in range(80)]
    (folder / "train.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                                   "categories": categories}))
    return [f"TrainDataset.dataset_dir={folder}", "TrainDataset.image_dir=images", "TrainDataset.anno_path=train.json"]


# the kit's own run at one fixed size and every box kept (no random crop or expand), on the CPU, one epoch
RUN = ["TrainReader.sample_transforms=[{Decode: {}}, {RandomFlip: {}}]", SMALL.replace("160", "320"),
       "use_gpu=false", "epoch=1", "log_iter=1", "snapshot_epoch=100"]


@needs_kit
@needs_requirements
@pytest.mark.paddle
@pytest.mark.slow(30)
def test_the_kits_own_train_peaks_where_the_probe_did(tmp_path):
    """PP-YOLOE+ s (EMA on) at 320 px, batch 4, 20 boxes an image, the shipped reader (4 workers, shared memory: what
    they read is never in Paddle's allocator): vramtune's probe, then the kit's own tools/train.py on 16 images of
    the same shapes, one epoch."""
    options = [*RUN, "TrainReader.batch_size=4"]
    done = subprocess.run([sys.executable, "-m", "vramtune", "measure", str(CHECKOUT / PPYOLOE), "--device", "cpu",
                           "--budget", "3GiB", "--micro-batch", "4", "--json", *[f"-O{option}" for option in options]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HUNG,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    probed = json.loads(done.stdout)["peak_bytes"]
    data = coco_dataset(tmp_path / "data", 16, 352, 20)
    peak, _ = client.run_train(CHECKOUT, CHECKOUT / PPYOLOE, [*options, "pretrain_weights=null",
                                                              f"save_dir={tmp_path / 'out'}", *data], tmp_path,
                               one_flag=True)
    # measured (4 workers, batch 4): probe 510,426,504 B, the kit 505,472,212 B (-0.97%): the batch it trains on is
    # in shared memory too, which Paddle's host allocator never counts (4.9 MB of images)
    log_band(probed, peak)
    assert abs(peak - probed) / probed < 0.02, (peak, probed)


@needs_kit
@needs_requirements
@pytest.mark.paddle
@pytest.mark.slow(12)
def test_ppdets_own_loader_reads_the_tuned_file_with_only_the_batch_changed(fake_cli, tmp_path):
    config = checkout_copy(tmp_path, PPYOLOE)
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", config, "--device", "cpu", "--budget", "30MiB")
    assert code == 0, stderr
    tuned = config.with_name(config.stem + ".tuned.yml")
    before, after = kit_config(config, []), kit_config(tuned, [])
    assert (before["TrainReader"].pop("batch_size"), after["TrainReader"].pop("batch_size")) == (8, 4)
    assert (before.pop("filename"), after.pop("filename")) == (config.stem, tuned.stem)
    assert after == before


@needs_kit
@needs_requirements
@pytest.mark.paddle
@pytest.mark.slow(60)
def test_the_kits_own_train_on_the_applied_file_peaks_where_the_probe_did(tmp_path):
    """apply at a budget between batch 2 and 4 (no workers: the loader's 5 batches ahead count): the kit cannot
    accumulate, so the largest batch that fits, 2, goes into the user's file; tools/train.py on it peaks there."""
    config = checkout_copy(tmp_path, PPYOLOE)
    out = config.with_name("tuned.yml")  # beside the original: its _BASE_ paths are relative
    options = [*RUN, "worker_num=0"]
    done = subprocess.run([sys.executable, "-m", "vramtune", "apply", str(config), "--device", "cpu", "--budget",
                           "400MiB", "-o", str(out), "--json", *[f"-O{option}" for option in options]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HUNG,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads(done.stdout)["exported"]
    assert exported["micro_batch"] == 2 and diff(config, out) == [  # the file sets TrainReader.batch_size only
        "+" + budget_line(400 * MiB, options).rstrip("\n"),
        "+TrainReader: {batch_size: 2}"]
    data = coco_dataset(tmp_path / "data", 16, 352, 20)
    peak, _ = client.run_train(config.parents[2], out, [*options, "pretrain_weights=null",
                                                        f"save_dir={tmp_path / 'out'}", *data], tmp_path,
                               one_flag=True)
    # measured: probe 332,395,684 B, the kit 332,379,404 B
    log_band(exported["peak_bytes"], peak)
    assert abs(peak - exported["peak_bytes"]) / exported["peak_bytes"] < 0.02, (peak, exported["peak_bytes"])


@needs_kit
@needs_requirements
@pytest.mark.paddle
@pytest.mark.slow(13)
def test_estimate_counts_the_kits_model_whose_initialisers_fill_parameters_in_place(tmp_path):
    """ppdet's PPYOLOEHead fills its parameters at construction (set_value), which paddle.LazyGuard's cannot take:
    the source builds them eagerly; estimate's count and its overrides in the kit's -o (merged as ppdet merges)."""
    done = subprocess.run([sys.executable, "-m", "vramtune", "estimate", str(CHECKOUT / PPYOLOE), "--card", "1GiB",
                           f"-O{SMALL}"], cwd=tmp_path, capture_output=True, text=True, timeout=HUNG,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    said = " ".join((done.stdout + done.stderr).split())
    assert "8,105,523 parameters (8,084,594 trained)" in said
    assert "as the kit's overrides (the evaluation batch is not estimated): -o 'TrainReader={batch_size: 8}'" in said


PICODET = "configs/picodet/picodet_s_320_coco_lcnet.yml"  # LCNet x0.75 + LCPAN + PicoHeadV2, EMA on, batch 64


@needs_kit
def test_picodet_is_read_as_the_kit_trains_it():
    spec = load_spec(CHECKOUT / PICODET)
    assert spec.train.target_batch == 64 and spec.train.optimizer == "momentum"
    assert (f"{CHECKOUT / PICODET}: the dataset is never read: probes train on random 384x384 images (the largest "
            "training size) with 20 random boxes each, at epoch 0 (PicoDet's static ATSS assigner, until "
            "static_assigner_epoch; the task-aligned one after it is not measured)") in spec.warnings
    with pytest.raises(SpecError, match=r"architecture PicoDet \(head PicoHead\): its training inputs are not made"):
        load_spec(CHECKOUT / "configs/picodet/legacy_model/picodet_s_320_coco.yml")  # PicoDet v1's GFL head


@needs_kit
@needs_requirements
@pytest.mark.paddle
def test_picodet_the_kits_own_train_on_the_applied_file_peaks_where_the_probe_did(tmp_path):
    """PicoDet s (EMA on) at 160 px, no workers (the loader's 5 batches ahead count): apply at a budget below batch 6
    writes the largest batch that fits into the user's file; tools/train.py on it, 12 batches an epoch, peaks
    there."""
    config = checkout_copy(tmp_path, PICODET)
    out = config.with_name("tuned.yml")
    options = ["TrainReader.sample_transforms=[{Decode: {}}, {RandomFlip: {}}]", SMALL, "use_gpu=false", "epoch=1",
               "log_iter=1", "snapshot_epoch=100", "worker_num=0"]
    done = subprocess.run([sys.executable, "-m", "vramtune", "apply", str(config), "--device", "cpu", "--budget",
                           "125MiB", "-o", str(out), "--json", "-OTrainReader.batch_size=6",
                           *[f"-O{option}" for option in options]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads(done.stdout)["exported"]
    batch = exported["micro_batch"]
    assert batch == 4 and read_config(config.parents[2], out, [])["TrainReader"]["batch_size"] == 4  # its own reader
    data = coco_dataset(tmp_path / "data", 12 * batch, 192, 20)
    peak, _ = client.run_train(config.parents[2], out, [*options, "pretrain_weights=null",
                                                        f"save_dir={tmp_path / 'out'}", *data], tmp_path,
                               timeout=1800, one_flag=True)
    # measured: probe 123,022,576 B, the kit 122,927,912 B (-0.08%)
    assert peak == pytest.approx(exported["peak_bytes"], rel=0.01), (peak, exported["peak_bytes"])
