"""PaddleOCR recognition configs as specs: first_bs and its alias, multi-scale batches, evaluation, the kit's own
tools/train.py on the tuned file peaking where vramtune's probe did."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kit_client as client
import pytest
import yaml
from test_paddleclas import diff

from vramtune.dialects.kits.paddleocr import scales
from vramtune.spec import SpecError, load_spec

CHECKOUT = client.kit("PaddleOCR")
needs_kit = pytest.mark.skipif(CHECKOUT is None, reason=f"no PaddleOCR checkout in {client.KITS}")
MOBILE = "configs/rec/PP-OCRv5/PP-OCRv5_mobile_rec.yml"
SERVER = "configs/rec/PP-OCRv5/PP-OCRv5_server_rec.yml"


@needs_kit
@pytest.mark.parametrize("config", [MOBILE, SERVER])
def test_first_bs_is_the_batch_and_evaluation_is_a_phase(config):
    spec = load_spec(CHECKOUT / config)
    raw = yaml.safe_load((CHECKOUT / config).read_text())
    assert spec.source == "paddleocr"
    assert spec.train.target_batch == raw["Train"]["sampler"]["first_bs"]
    assert spec.settings["evaluation"].batch == raw["Eval"]["loader"]["batch_size_per_card"]
    assert spec.train.optimizer == "adam" and not spec.settings["recompute"].enabled


def test_each_scale_has_its_own_batch():
    config = {"Train": {"sampler": {"name": "MultiScaleSampler", "scales": [[320, 32], [320, 48], [320, 64]],
                                    "first_bs": 8, "fix_bs": False, "divided_factor": [8, 16]}}}
    assert scales(config, 8) == [(320, 32, 8), (320, 48, 5), (320, 64, 4)]
    config["Train"]["sampler"]["fix_bs"] = True
    assert scales(config, 8) == [(320, 32, 8), (320, 48, 8), (320, 64, 8)]


@needs_kit
def test_a_detection_config_is_refused_by_name():
    with pytest.raises(SpecError, match="only recognition models"):
        load_spec(CHECKOUT / "configs/det/PP-OCRv5/PP-OCRv5_mobile_det.yml")


def ocr_dataset(folder: Path, train: int, evaluate: int, characters: list[str]) -> list[str]:
    """Recognition label files (path, tab, text) over random images; the -o options that train on them once."""
    names = client.write_images(folder / "images", max(train, evaluate), 32, 100)
    text = "".join(characters[:10])
    (folder / "train.txt").write_text("".join(f"images/{n}\t{text}\n" for n in names[:train]), encoding="utf-8")
    (folder / "val.txt").write_text("".join(f"images/{n}\t{text}\n" for n in names[:evaluate]), encoding="utf-8")
    return ["Global.use_gpu=False", "Global.distributed=False", "Global.epoch_num=1", "Global.print_batch_step=1",
            f"Global.save_model_dir={folder}/out", "Global.save_epoch_step=100", "Global.eval_batch_step=[0,3]",
            f"Train.dataset.data_dir={folder}", f"Train.dataset.label_file_list=['{folder}/train.txt']",
            "Train.loader.num_workers=0", f"Eval.dataset.data_dir={folder}",
            f"Eval.dataset.label_file_list=['{folder}/val.txt']", "Eval.loader.num_workers=0"]


@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleOCR"), reason=client.missing_reason("PaddleOCR"))
def test_the_kits_own_train_peaks_where_the_probe_did(tmp_path):
    """PP-OCRv5 mobile at first_bs 4 (scales 32/48/64 px high at 4/2/2): a budget that fits first_bs 2 only."""
    shape = ["Train.sampler.first_bs=4", "Eval.loader.batch_size_per_card=4"]
    out = tmp_path / "rec.tuned.yml"
    done = subprocess.run([sys.executable, "-m", "vramtune", "apply", str(CHECKOUT / MOBILE), "--device", "cpu",
                           "--budget", "950MiB", "-o", str(out), "--json", *[f"-O{o}" for o in shape]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    exported = answer["exported"]
    assert exported["micro_batch"] == 2 and exported["eval_batch"] == 4
    assert any("effective batch falls from 4 to 2" in warning for warning in answer["warnings"])
    # first_bs is anchored (&bs) and aliased by batch_size_per_card: the anchor moves, the alias follows
    assert diff(CHECKOUT / MOBILE, out) == ["-    first_bs: &bs 128", "+    first_bs: &bs 2",
                                            "-    batch_size_per_card: 128", "+    batch_size_per_card: 4"]
    tuned = yaml.safe_load(out.read_text())
    assert tuned["Train"]["loader"]["batch_size_per_card"] == 2

    characters = (CHECKOUT / "ppocr/utils/dict/ppocrv5_dict.txt").read_text(encoding="utf-8").split("\n")[:10]
    options = ocr_dataset(tmp_path / "data", train=4, evaluate=4, characters=characters)
    peak, output = client.run_train(CHECKOUT, out, options, tmp_path, one_flag=True)
    assert "eval model" in output
    probed = max(exported["peak_bytes"], exported["eval_peaks"]["4"])
    assert abs(peak - probed) / probed < 0.05, (peak, probed)
