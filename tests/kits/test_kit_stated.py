"""The strategy a kit config states (`Dialect.stated`, what `check` and `measure` measure), read as the kit reads it:
the same strategy as the round trip through apply's writer (tests/round_trip.py `written_as`) wherever the round trip
reads the file, over the kit configs the tests use and over the files `apply` writes. Besides, it reads what the
round trip cannot: a batch in a `_base_` file or set by the config's overrides (issue 40, rough edge 1). Two
readings are the kit's own where the round trip's differ: a CPU trains fp32 whatever the AMP keys say (Paddle's AMP
does nothing there: a probe there runs fp32), and `Global.to_static: True` compiles (apply's writer writes nothing
for an eager choice, so the round trip reads a compiling file as eager)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import kit_client as client
import pytest
from fakes import FakeDevice, MiB
from round_trip import written_as

from vramtune.checking.stated import stated_strategy
from vramtune.core.strategy import Strategy
from vramtune.dialects.recorded import recorded_options
from vramtune.spec import load_spec

KINDS = ("gpu", "cpu")
VIT = "ppcls/configs/ImageNet/VisionTransformer/ViT_base_patch16_224.yaml"
MOBILE = "configs/rec/PP-OCRv5/PP-OCRv5_mobile_rec.yml"
FCN = "configs/fcn/fcn_hrnetw18_cityscapes_1024x512_80k.yml"  # batch_size 2 from its _base_ only
PPYOLOE = "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml"  # TrainReader.batch_size 8 from its _BASE_ reader


def needs(kit: str):
    return pytest.mark.skipif(client.kit(kit) is None, reason=f"no {kit} checkout in {client.KITS}")


def on_cpu(strategy: Strategy) -> Strategy:
    """What a CPU probe runs of a strategy: fp32."""
    return strategy.with_(precision="fp32")


# the kit configs the tests use, with overrides that leave the file's batch alone (the round trip reads them)
READ_BY_BOTH = [
    ("PaddleClas", "ppcls/configs/ImageNet/ResNet/ResNet50.yaml", []),
    ("PaddleClas", "ppcls/configs/ImageNet/ResNet/ResNet18.yaml", []),
    ("PaddleClas", VIT, []),
    ("PaddleClas", "ppcls/configs/ImageNet/ConvNeXt/ConvNeXt_tiny.yaml", []),  # update_freq 4
    ("PaddleClas", "ppcls/configs/GeneralRecognition/GeneralRecognition_PPLCNet_x2_5.yaml",
     ["Global.eval_during_train=False"]),
    ("PaddleOCR", MOBILE, []),
    ("PaddleOCR", "configs/rec/PP-OCRv5/PP-OCRv5_server_rec.yml", []),
    ("PaddleOCR", "configs/rec/PP-OCRv3/en_PP-OCRv3_mobile_rec.yml", ["Global.use_ema=true"]),
    ("PaddleOCR", "configs/rec/rec_mv3_none_bilstm_ctc.yml", []),
    ("PaddleSeg", "configs/quick_start/pp_liteseg_optic_disc_512x512_1k.yml", []),
    ("PaddleSeg", "configs/pp_liteseg/pp_liteseg_stdc1_cityscapes_1024x512_scale0.5_160k.yml", []),  # and _base_
    ("PaddleDetection", "configs/ppyoloe/voc/ppyoloe_plus_crn_s_30e_voc.yml", ["epoch=1"]),  # its own TrainReader
]


@pytest.mark.parametrize(("kit", "config", "options"), READ_BY_BOTH,
                         ids=[f"{kit}-{Path(config).stem}" for kit, config, _ in READ_BY_BOTH])
def test_the_stated_strategy_is_the_round_trips(kit, config, options):
    if client.kit(kit) is None:
        pytest.skip(f"no {kit} checkout in {client.KITS}")
    spec = load_spec(client.kit(kit) / config, {"kit.options": options})
    for kind in KINDS:
        assert stated_strategy(spec, kind) == written_as(spec, kind), kind


@pytest.mark.parametrize(("kit", "config", "options", "stated"), [
    ("PaddleSeg", FCN, [], Strategy(micro_batch=2)),
    ("PaddleSeg", FCN, ["batch_size=8"], Strategy(micro_batch=8)),
    ("PaddleDetection", PPYOLOE, [], Strategy(micro_batch=8)),
    ("PaddleDetection", PPYOLOE, ["TrainReader.batch_size=3"], Strategy(micro_batch=3)),
    ("PaddleClas", VIT, ["DataLoader.Train.sampler.batch_size=8", "Global.update_freq=2"],
     Strategy(micro_batch=8, accumulation=2)),
    ("PaddleOCR", MOBILE, ["Train.sampler.first_bs=8"], Strategy(micro_batch=8)),
])
def test_a_batch_in_the_base_files_or_the_overrides_is_read_as_the_kit_reads_it(kit, config, options, stated):
    """What the round trip cannot read: the file itself says another batch, or none."""
    if client.kit(kit) is None:
        pytest.skip(f"no {kit} checkout in {client.KITS}")
    spec = load_spec(client.kit(kit) / config, {"kit.options": options})
    assert [stated_strategy(spec, kind) for kind in KINDS] == [stated, stated]
    ranks = load_spec(client.kit(kit) / config, {"kit.options": options, "devices": 2})
    assert stated_strategy(ranks, "gpu") == stated.with_(devices=2)  # --devices 2: the batch is per rank


@needs("PaddleClas")
def test_amp_on_a_cpu_reads_fp32_and_a_compiling_config_compiles():
    """PPLCNet_x1_0_ssld says AMP O1 and Global.to_static: True. The round trip reads fp16 on a CPU too (the kit's
    writer writes AMP whatever the device) and eager (for eager it writes nothing, and the file's key stays)."""
    spec = load_spec(client.kit("PaddleClas") / "ppcls/configs/ImageNet/Distillation/PPLCNet_x1_0_ssld.yaml")
    assert stated_strategy(spec, "gpu") == Strategy(precision="fp16", micro_batch=128, to_static=True)
    assert stated_strategy(spec, "cpu") == Strategy(precision="fp32", micro_batch=128, to_static=True)
    assert [written_as(spec, kind) for kind in KINDS] == [Strategy(precision="fp16", micro_batch=128)] * 2


@needs("PaddleOCR")
@pytest.mark.parametrize(("options", "precision"), [
    (["Global.use_amp=true"], "fp16-o2"),  # tools/train.py's defaults: O2, float16
    (["Global.use_amp=true", "Global.amp_level=O1", "Global.amp_dtype=bfloat16"], "bf16"),
    (["Global.use_amp=false", "Global.amp_level=O1"], "fp32"),
])
def test_paddleocrs_amp_keys_state_its_precision(options, precision):
    spec = load_spec(client.kit("PaddleOCR") / MOBILE, {"kit.options": options})
    assert (stated_strategy(spec, "gpu").precision, stated_strategy(spec, "cpu").precision) == (precision, "fp32")


def checkout_copy(root: Path, kit: str, config: str) -> Path:
    """A checkout of the kit whose folders down to the config are real, their other entries symlinks into the kit,
    and the config a copy: apply writes beside it, where its base files still resolve, never into the kit."""
    source = client.kit(kit)
    parts = Path(config).parts
    for depth in range(len(parts)):
        here, there = root / kit / Path(*parts[:depth]), source / Path(*parts[:depth])
        here.mkdir(parents=True, exist_ok=True)
        for entry in there.iterdir():
            if entry.name != parts[depth] and not os.path.lexists(here / entry.name):
                (here / entry.name).symlink_to(entry)
    shutil.copyfile(source / config, root / kit / config)
    return root / kit / config


GPU = dict(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5, amp_speed=2.0)
WRITTEN = [  # (kit, config, apply's overrides, budget, the device, what apply chose)
    ("PaddleClas", VIT, [], "35MiB", GPU, Strategy(precision="fp16", micro_batch=8, accumulation=8)),
    ("PaddleOCR", MOBILE, ["Train.sampler.first_bs=8"], "28MiB", {**GPU, "o2_factor": 0.3},
     Strategy(precision="fp16-o2", micro_batch=8)),  # only O2 fits the batch (an OCR config's amp_level: O2)
    ("PaddleSeg", FCN, ["batch_size=8", "iters=10"], "30MiB", {}, Strategy(micro_batch=4)),  # into the file
    ("PaddleDetection", PPYOLOE, ["epoch=1"], "30MiB", {}, Strategy(micro_batch=4)),  # TrainReader: {batch_size: 4}
]


@pytest.mark.parametrize(("kit", "config", "options", "budget", "device", "chosen"), WRITTEN,
                         ids=[kit for kit, *_ in WRITTEN])
def test_the_file_apply_wrote_states_what_it_chose_as_the_round_trip_reads_it(fake_cli, tmp_path, kit, config,
                                                                               options, budget, device, chosen):
    if client.kit(kit) is None:
        pytest.skip(f"no {kit} checkout in {client.KITS}")
    mine = checkout_copy(tmp_path, kit, config)
    cli, _ = fake_cli(FakeDevice(**device))
    out = mine.with_name("tuned.yml")
    code, _, err = cli("apply", mine, "--budget", budget, "-o", out, *(f"-O{option}" for option in options))
    assert code == 0, err
    spec = load_spec(out, {"kit.options": recorded_options(out.read_text())})
    assert stated_strategy(spec, "gpu") == written_as(spec, "gpu") == chosen
    assert stated_strategy(spec, "cpu") == on_cpu(written_as(spec, "cpu")) == on_cpu(chosen)
