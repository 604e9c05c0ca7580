"""PaddleSeg configs as specs: read with the kit's own loader (`_base_` files, `--opts`) Paddle-free, written back
with only batch_size changed and loaded by the kit's own Config, probed with the kit's own model and loss, and the
kit's own tools/train.py run on the tuned file peaking where vramtune's probe did."""
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
import yaml
from band import log_band
from conftest import HUNG
from fakes import FakeDevice, MiB
from test_paddleclas import diff

from vramtune.dialects.recorded import budget_line
from vramtune.spec import SpecError, load_spec

CHECKOUT = client.kit("PaddleSeg")
needs_kit = pytest.mark.skipif(CHECKOUT is None, reason=f"no PaddleSeg checkout in {client.KITS}")
REQUIREMENTS = ("cv2", "scipy", "sklearn", "skimage", "filelock", "tqdm", "prettytable", "visualdl", "six")
MISSING = [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]
needs_requirements = pytest.mark.skipif(bool(MISSING), reason=f"PaddleSeg's requirements are not installed here "
                                                              f"(missing {', '.join(MISSING)})")
LITESEG = "configs/pp_liteseg/pp_liteseg_stdc1_cityscapes_1024x512_scale0.5_160k.yml"  # batch_size 4, _base_ too
FCN = "configs/fcn/fcn_hrnetw18_cityscapes_1024x512_80k.yml"  # batch_size 2 from its _base_ only
OPTIC = "configs/quick_start/pp_liteseg_optic_disc_512x512_1k.yml"  # no _base_, batch_size 4, 2 classes
CROP = "train_dataset.transforms=[{'type':'RandomPaddingCrop','crop_size':[128,128]},{'type':'Normalize'}]"


@needs_kit
def test_a_config_is_read_with_its_base_files():
    spec = load_spec(CHECKOUT / LITESEG)
    assert spec.source == "paddleseg" and spec.train.target_batch == 4
    assert spec.train.optimizer == "momentum"  # SGD with momentum, from _base_/cityscapes.yml
    assert spec.model.checkout == str(CHECKOUT.resolve())
    assert spec.model.probe_options == ["model.backbone.pretrained=None"]  # never downloaded
    said = " ".join(spec.warnings)
    assert "random 1024x512 images (the train crop)" in said
    assert "model.backbone.pretrained: not downloaded" in said
    assert "AMP is set by tools/train.py's flags in PaddleSeg, not by a config key: searched in fp32 only" in said
    assert load_spec(CHECKOUT / FCN).train.target_batch == 2  # only its _base_ says it


@needs_kit
def test_overrides_are_the_kits_opts_and_bad_ones_are_one_message():
    spec = load_spec(CHECKOUT / OPTIC, {"kit.options": ["batch_size=8", CROP]})
    assert spec.train.target_batch == 8 and spec.model.options == ["batch_size=8", CROP]
    assert "random 128x128 images" in " ".join(spec.warnings)
    # the kit's --opts cannot index a list, nor add a key: its own message
    with pytest.raises(SpecError, match=r"Can not update train_dataset\.transforms\.1\.crop_size, because it is not in"):
        load_spec(CHECKOUT / OPTIC, {"kit.options": ["train_dataset.transforms.1.crop_size=[64,64]"]})
    with pytest.raises(SpecError, match="batch_size must be a positive integer, got 0"):
        load_spec(CHECKOUT / OPTIC, {"kit.options": ["batch_size=0"]})


@needs_kit
def test_what_the_probe_cannot_train_as_the_kit_does_is_refused_by_name(tmp_path):
    with pytest.raises(SpecError, match="to_static_training: True: probes train eager"):
        load_spec(CHECKOUT / LITESEG, {"kit.options": ["to_static_training=True"]})
    with pytest.raises(SpecError, match=r"train_dataset makes instance targets \(MaskFormer\): not synthesised"):
        load_spec(CHECKOUT / "configs/maskformer/maskformer_swin_tiny_ade20k_512x512_160k.yml")
    with pytest.raises(SpecError, match=r"train_dataset makes edge labels \(GSCNN, DecoupledSegNet, PIDNet\)"):
        load_spec(CHECKOUT / "configs/gscnn/gscnn_resnet50_os8_cityscapes_1024x512_80k.yml")
    with pytest.raises(SpecError, match=r"no model \(after its _base_ files\)"):
        load_spec(CHECKOUT / "configs/smrt/base_cfg.yml")
    with pytest.raises(SpecError, match="no fixed-size crop or resize"):
        load_spec(CHECKOUT / OPTIC, {"kit.options": ["train_dataset.transforms=[{'type':'Normalize'}]"]})
    copy = tmp_path / "optic.yml"
    shutil.copy(CHECKOUT / OPTIC, copy)
    with pytest.raises(SpecError, match="outside a paddleseg checkout"):
        load_spec(copy)


@needs_kit
def test_the_per_card_batch_times_the_devices_is_the_target():
    spec = load_spec(CHECKOUT / LITESEG, {"devices": 4})
    assert (spec.devices, spec.train.target_batch) == (4, 4 * 4)


def checkout_copy(tmp_path: Path, *configs: str) -> Path:
    """A checkout of the kit's code (symlinks) whose configs are copies, so that apply may write beside them."""
    checkout = tmp_path / "PaddleSeg"
    checkout.mkdir()
    for part in ("paddleseg", "tools"):
        (checkout / part).symlink_to(CHECKOUT / part)
    for config in (*configs, "configs/_base_/cityscapes.yml"):
        (checkout / config).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / config, checkout / config)
    return checkout


@needs_kit
def test_apply_writes_only_batch_size_beside_the_config(fake_cli, tmp_path):
    """The batch from the _base_ file is written into the user's file (the kit merges it over the base)."""
    checkout = checkout_copy(tmp_path, LITESEG, FCN)
    cli, backend = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", checkout / LITESEG, "--device", "cpu", "--budget", "26MiB",
                          "-O", "iters=10")
    assert code == 0, stderr
    tuned = (checkout / LITESEG).with_name(Path(LITESEG).stem + ".tuned.yml")
    assert diff(checkout / LITESEG, tuned) == [
        "+# vramtune: tuned for a budget of 26.0 MiB (27262976 bytes); `vramtune check FILE -O iters=10` "
        "gates it in CI",
        "-batch_size: 4  # total: 4*4", "+batch_size: 2  # total: 4*4"]
    assert backend.jobs[0].model["options"] == ["iters=10"]
    said = " ".join(stderr.split())
    assert "the batch per card falls from 4 to 2" in said and "x0.5 here" in said
    assert "_base_ paths (../_base_/cityscapes.yml) are relative to its folder" in said
    assert (f"cd {checkout.resolve()} && PYTHONPATH=. python tools/train.py --config {tuned.resolve()} --device cpu "
            "--opts iters=10" in said)

    code, _, stderr = cli("apply", checkout / FCN, "--device", "cpu", "--budget", "30MiB", "-O", "batch_size=8")
    assert code == 0, stderr
    said = " ".join(stderr.split())
    assert "--opts batch_size=8: tuned in the file now; do not pass them to the kit again" in said
    tuned = (checkout / FCN).with_name(Path(FCN).stem + ".tuned.yml").resolve()
    assert f"python tools/train.py --config {tuned} --device cpu\n" in stderr  # the tuned override not passed again
    assert diff(checkout / FCN, (checkout / FCN).with_name(Path(FCN).stem + ".tuned.yml")) == [
        "+# vramtune: tuned for a budget of 30.0 MiB (31457280 bytes); `vramtune check FILE` gates it in CI",
        "+batch_size: 4"]


def kit_config(checkout: Path, config: Path) -> dict:
    """The config as the kit's own Config reads it (its checker's rules applied), in a child with Paddle."""
    script = ("import json, sys\nfrom paddleseg.cvlibs import Config\n"
              "print('CONFIG', json.dumps(Config(sys.argv[1]).dic, default=str))")
    done = subprocess.run([sys.executable, "-c", script, str(config)], capture_output=True, text=True, timeout=HUNG,
                          env={**client.child_env(), "PYTHONPATH": str(checkout)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("CONFIG ", 1)[1])


@needs_kit
@needs_requirements
@pytest.mark.paddle
def test_the_kits_config_loads_the_tuned_file_with_only_batch_size_changed(fake_cli, tmp_path):
    checkout = checkout_copy(tmp_path, FCN)
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", checkout / FCN, "--device", "cpu", "--budget", "30MiB", "--target-batch", "8")
    assert code == 0, stderr
    before = kit_config(checkout, checkout / FCN)
    after = kit_config(checkout, (checkout / FCN).with_name(Path(FCN).stem + ".tuned.yml"))
    assert (before.pop("batch_size"), after.pop("batch_size")) == (2, 4)  # the _base_'s 2; 4 of 8 fits in 30 MiB
    assert after == before


def vramtune(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramtune", *arguments], cwd=cwd, capture_output=True, text=True,
                          timeout=HUNG, env={**client.child_env(), "VRAMTUNE_CACHE": str(cwd / "cache")})


def seg_dataset(folder: Path, count: int, side: int) -> list[str]:
    """A `Dataset` of random JPEGs and 2-class PNG labels; the --opts that train on it."""
    import cv2
    import numpy as np

    names = client.write_images(folder / "images", count, side, side)
    (folder / "labels").mkdir()
    rng = np.random.default_rng(1)
    lines = []
    for name in names:
        label = name.replace(".jpg", ".png")
        cv2.imwrite(str(folder / "labels" / label), rng.integers(0, 2, (side, side), dtype=np.uint8))
        lines.append(f"images/{name} labels/{label}\n")
    (folder / "train.txt").write_text("".join(lines))
    return [f"train_dataset.dataset_root={folder}", f"train_dataset.train_path={folder}/train.txt"]


def run_train(config: Path, options: list[str], work: Path) -> int:
    """PaddleSeg's own tools/train.py (cwd: the checkout, the checkout on PYTHONPATH as its docs say), bounded by its
    own --iters; the host allocator peak its process reached."""
    hook = work / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(client.HOOK, encoding="utf-8")
    env = {**client.child_env(), "PYTHONPATH": os.pathsep.join([str(hook), str(CHECKOUT)])}
    arguments = [sys.executable, "tools/train.py", "--config", str(config), "--device", "cpu", "--iters", "4",
                 "--save_dir", str(work / "out"), "--log_iters", "1", "--opts", *options]
    done = subprocess.run(arguments, cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=HUNG)
    output = done.stdout + done.stderr
    found = client.PEAK.findall(output)
    assert done.returncode == 0 and found, f"tools/train.py failed ({done.returncode}):\n{output[-4000:]}"
    return int(found[-1])


@needs_kit
@needs_requirements
@pytest.mark.paddle
@pytest.mark.slow(20)
def test_the_kits_own_train_peaks_where_the_probe_did(tmp_path):
    """PP-LiteSeg (STDC2, 12.3 M parameters) at a 128 px crop, batch 4: a budget between batch 3 and 4; PaddleSeg
    cannot accumulate, so apply writes the largest batch that fits, 3 (2 when only the divisors of 4 were tried). 36
    images, 12 batches an epoch: enough for the kit's DataLoader to hold all it reads ahead (5 batches on a CPU) at
    every measured step, as on a real dataset."""
    out = tmp_path / "optic.tuned.yml"
    done = vramtune("apply", str(CHECKOUT / OPTIC), "--device", "cpu", "--budget", "190MiB", "-o", str(out),
                    "--json", f"-O{CROP}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads(done.stdout)["exported"]
    assert exported["micro_batch"] == 3
    assert diff(CHECKOUT / OPTIC, out) == [
        "-batch_size: 4",  # the file's first line: the recorded budget comes before it
        "+" + budget_line(190 * MiB, [CROP]).rstrip("\n"),  # the crop: check's -O
        "+batch_size: 3"]
    assert yaml.safe_load(out.read_text())["batch_size"] == 3

    options = [CROP, "model.backbone.pretrained=None", *seg_dataset(tmp_path / "data", 36, 144)]
    peak = run_train(out, options, tmp_path)
    probed = exported["peak_bytes"]
    log_band(probed, peak)
    assert abs(peak - probed) / probed < 0.01, (peak, probed)


@needs_kit
def test_the_reports_words_are_said_in_the_kits_keys(fake_cli):
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("probe", CHECKOUT / OPTIC, "--device", "cpu", "--budget", "30MiB")
    assert code == 0, stderr
    assert ("note: in PaddleSeg's keys: m (the micro-batch) is batch_size; k only measures a smaller batch, which "
            "PaddleSeg cannot accumulate: apply writes the largest m that fits; r=0: no block re-run in backward "
            "(PaddleSeg has no key for it; never searched)" in " ".join(stderr.split()))


@needs_kit
@needs_requirements
@pytest.mark.paddle
def test_apply_verifies_the_answer_with_the_kits_own_train_on_the_users_data(tmp_path):
    """The dataset's place given with -O (issue 36): apply runs PaddleSeg's tools/train.py on the tuned file for 3
    optimizer steps (the hook ends it), its output in a scratch folder, and reads its peak beside the probe's."""
    options = [CROP, *seg_dataset(tmp_path / "data", 36, 144)]
    out = tmp_path / "optic.tuned.yml"
    before = sorted(path.name for path in CHECKOUT.iterdir())
    done = vramtune("apply", str(CHECKOUT / OPTIC), "--device", "cpu", "--budget", "190MiB", "-o", str(out),
                    "--json", *[f"-O{option}" for option in options], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    [run] = answer["verification"]
    assert (run["tool"], run["status"], run["steps"]) == ("PaddleSeg's tools/train.py", "fits", 3), run
    assert run["probe_bytes"] == answer["exported"]["peak_bytes"]
    log_band(run["probe_bytes"], run["peak_bytes"])
    assert 0.995 <= run["ratio"] <= 1.01, run
    assert "verified by PaddleSeg's tools/train.py: " in done.stderr
    assert sorted(path.name for path in CHECKOUT.iterdir()) == before  # nothing written in the user's checkout


@needs_kit
def test_where_the_configs_data_is_not_there_the_kit_does_not_verify_and_says_why(fake_cli, tmp_path):
    cli, backend = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", CHECKOUT / OPTIC, "--device", "cpu", "--budget", "30MiB", "-o",
                          tmp_path / "t.yml")
    assert code == 0 and backend.tool_runs == [], stderr
    assert (f"not verified by the file's own tool: PaddleSeg's tools/train.py trains on the config's own data, which "
            f"is not in {CHECKOUT.resolve()} (train_dataset.dataset_root: data/optic_disc_seg; train_dataset.train_path: "
            "data/optic_disc_seg/train_list.txt): give its place with -O, or name a run of your own with "
            "--verify-with\n") in stderr
