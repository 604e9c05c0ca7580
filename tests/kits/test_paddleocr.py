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
from band import UNDER, log_band
from conftest import HUNG
from fakes import FakeDevice, MiB
from test_paddleclas import diff

from vramtune.dialects.kits.config import apply_options
from vramtune.dialects.kits.ocr_ema import kept_copies
from vramtune.dialects.kits.paddleocr import KIT, scales
from vramtune.dialects.recorded import budget_line
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
def test_a_table_config_is_refused_by_name():
    with pytest.raises(SpecError, match=r"only recognition models \(rec, not distilled\) and text detection \(det\)"):
        load_spec(CHECKOUT / "configs/table/SLANet.yml")


@needs_kit
@pytest.mark.parametrize(("config", "options", "said"), [
    (MOBILE, ["Global.use_sync_bn=true"], "Global.use_sync_bn: SyncBatchNorm is not measured"),
    ("configs/rec/rec_r50_fpn_srn.yml", [], "SRN: tools/program.py averages its weights before it evaluates"),
    ("configs/rec/rec_mv3_none_bilstm_ctc.yml", ["Global.to_static=true"], "this config has CRNN and None"),
    (MOBILE, ["Global.to_static=true", "Global.d2s_train_image_shape=null"], "this config has SVTR_LCNet and None"),
])
def test_what_is_not_measured_is_refused_by_name(config, options, said):
    with pytest.raises(SpecError, match=said):
        load_spec(CHECKOUT / config, {"kit.options": options})
    assert load_spec(CHECKOUT / MOBILE, {"kit.options": ["Global.to_static=true"]}).settings["to_static"]


@needs_kit
def test_the_kits_amp_op_lists_are_the_probes():
    spec = load_spec(CHECKOUT / MOBILE, {"kit.options": ["Global.amp_custom_black_list=[matmul_v2]"]})
    assert spec.settings["precision"].black_list == ["matmul_v2"] and spec.settings["precision"].white_list == []


def ocr_dataset(folder: Path, train: int, evaluate: int, characters: list[str]) -> list[str]:
    """Recognition label files (path, tab, text) over random images; the -o options that train on them once."""
    names = client.write_images(folder / "images", max(train, evaluate), 32, 100)
    text = "".join(characters[:10])
    (folder / "train.txt").write_text("".join(f"images/{n}\t{text}\n" for n in names[:train]), encoding="utf-8")
    (folder / "val.txt").write_text("".join(f"images/{n}\t{text}\n" for n in names[:evaluate]), encoding="utf-8")
    return ["Global.use_gpu=False", "Global.distributed=False", "Global.epoch_num=1", "Global.print_batch_step=1",
            f"Global.save_model_dir={folder}/out", "Global.save_epoch_step=100", "Global.eval_batch_step=[0,3]",
            f"Train.dataset.data_dir={folder}", f"Train.dataset.label_file_list=['{folder}/train.txt']",
            NO_WORKERS, f"Eval.dataset.data_dir={folder}",
            f"Eval.dataset.label_file_list=['{folder}/val.txt']", "Eval.loader.num_workers=0"]


NO_WORKERS = "Train.loader.num_workers=0"  # the loader's thread reads ahead in the training process: 5 batches


WORKERS = ["Train.loader.num_workers=1", "Eval.loader.num_workers=1"]  # shared memory, as shipped


@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleOCR"), reason=client.missing_reason("PaddleOCR"))
@pytest.mark.slow(42)
def test_the_kits_own_train_peaks_where_the_probe_did(tmp_path):
    """PP-OCRv5 mobile at first_bs 4 (scales 32/48/64 px high at 4/2/2): a budget that fits first_bs 3 (3/2/1) but
    not 4; the kit cannot accumulate, so every batch up to the target is tried (before: 2, 4's divisor). Its
    loaders have a worker each with shared memory, as shipped: on a CPU neither the kit's batches nor the probe's are
    in Paddle's allocator. Two evaluation batches of 4: from the second on, tools/program.py's eval() holds the step
    before's predictions (4 x 40 x 18,385 classes x 4 B, 11.8 MB) and numpy copies of its batch while the next
    forward runs, and train() its last step's predictions, which the probe holds too (issue 36: it measured the
    evaluation 4.1% under the kit's on PP-OCRv4 at batch 39)."""
    shape = ["Train.sampler.first_bs=4", "Eval.loader.batch_size_per_card=4", *WORKERS]
    out = tmp_path / "rec.tuned.yml"
    done = subprocess.run([sys.executable, "-m", "vramtune", "apply", str(CHECKOUT / MOBILE), "--device", "cpu",
                           "--budget", "950MiB", "-o", str(out), "--json", *[f"-O{o}" for o in shape]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HUNG,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    exported = answer["exported"]
    assert exported["micro_batch"] == 3 and exported["eval_batch"] == 4
    assert any("effective batch falls from 4 to 3" in warning for warning in answer["warnings"])
    # first_bs is anchored (&bs) and aliased by batch_size_per_card: the anchor moves, the alias follows
    assert diff(CHECKOUT / MOBILE, out) == [
        "+" + budget_line(950 * MiB, WORKERS).rstrip("\n"),  # the loaders' workers: check's -O
        "-    first_bs: &bs 128", "+    first_bs: &bs 3",
        "-    batch_size_per_card: 128", "+    batch_size_per_card: 4"]
    tuned = yaml.safe_load(out.read_text())
    assert tuned["Train"]["loader"]["batch_size_per_card"] == 3

    characters = (CHECKOUT / "ppocr/utils/dict/ppocrv5_dict.txt").read_text(encoding="utf-8").split("\n")[:10]
    options = [option for option in ocr_dataset(tmp_path / "data", train=4, evaluate=8, characters=characters)
               if "num_workers" not in option]
    peak, output = client.run_train(CHECKOUT, out, [*options, *WORKERS], tmp_path, one_flag=True)
    assert "eval model" in output
    # the run's peak (its evaluation peaks lower): 1.0022 on a quiet machine, 1.0170 in a loaded CI run (944,588,080 B
    # / 928,841,896 B): how much of what the kit's worker reads ahead is in the allocator at its peak varies with
    # the load; never under
    training = log_band(exported["peak_bytes"], peak, "training: ")
    assert 1 - UNDER <= training <= 1.02, training
    # the evaluation at first_bs 3 (scales 3/2/1) reads 2.3% over the kit's (574,923,468 B / 562,185,228 B): the
    # probe keeps the largest training step's predictions beside it, the kit its last step's, a smaller scale here
    # (at first_bs 2, 2/1/1, within the band): on the safe side, never under
    ratio = log_band(exported["eval_peaks"]["4"], client.eval_peak(output), "evaluation: ")
    assert 1 - UNDER <= ratio <= 1.03, ratio


EN_V3 = "configs/rec/PP-OCRv3/en_PP-OCRv3_mobile_rec.yml"  # SVTR_LCNet, 95 characters, one scale (48 x 320)
STATE_BYTES = """import sys, yaml
sys.path.insert(0, ".")
from vramtune.dialects.kits.paddleocr import set_head_sizes
from ppocr.modeling.architectures import build_model
from ppocr.postprocess import build_post_process
config = yaml.safe_load(open(sys.argv[1]))
set_head_sizes(config, len(build_post_process(config["PostProcess"], config["Global"]).character))
print(sum(t.numel().item() * t.element_size() for t in build_model(config["Architecture"]).state_dict().values()))
"""


@needs_kit
@pytest.mark.parametrize(("options", "copies"), [
    ([], 3),  # the shipped keys: 500 epochs, saved every 3, an evaluation every 2000 steps
    (["Global.epoch_num=1"], 1),  # the evaluation's copy only
    (["Global.epoch_num=3", "Global.save_epoch_step=3"], 2),  # no iter_epoch save before the last epoch ends
    (["Global.eval_batch_step=null"], 2),  # no evaluation: the saves' copies
])
def test_the_copies_tools_program_keeps_aside_with_ema(options, copies):
    raw = yaml.safe_load((CHECKOUT / EN_V3).read_text())
    assert kept_copies(apply_options(raw, ["Global.use_ema=true", *options], KIT.value)) == copies
    assert kept_copies(apply_options(raw, ["Global.use_ema=false"], KIT.value)) == 0


# two epochs of 3 steps, evaluated every 2 steps: from the first evaluation the steps hold its copy of the state,
# in epoch 2 the `latest` and `iter_epoch` saves' too (tools/program.py keeps each in a local)
EMA_RUN = ["Global.epoch_num=2", "Global.save_epoch_step=1", "Global.eval_batch_step=[0,2]"]


@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleOCR"), reason=client.missing_reason("PaddleOCR"))
@pytest.mark.slow(70)
def test_ema_is_measured_and_the_kits_own_train_agrees(tmp_path):
    """Global.use_ema: the kit's ModelEMA (fp32 shadows of the model's state, a tensor for each of its keys) and the
    3 deep copies of the state tools/program.py's swaps leave aside (each tensor once: the weights' bytes here) are in
    the probe's training peak above the same config without EMA; its evaluation of the EMA's weights in the
    evaluation peak; the kit's own tools/train.py on the exported file peaks where the probe did."""
    shape = ["Train.loader.batch_size_per_card=4", "Eval.loader.batch_size_per_card=4"]
    flags = [f"-O{option}" for option in [*shape, *EMA_RUN, NO_WORKERS]]
    env = {**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")}

    def vramtune(*arguments: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "vramtune", *arguments, "--json", *flags], cwd=tmp_path,
                              capture_output=True, text=True, timeout=HUNG, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    plain = vramtune("measure", str(CHECKOUT / EN_V3), "--device", "cpu", "--budget", "4GiB", "-m", "4")
    out = tmp_path / "rec.tuned.yml"
    exported = vramtune("apply", str(CHECKOUT / EN_V3), "--device", "cpu", "--budget", "4GiB", "--precision", "fp32",
                        "-o", str(out), "-OGlobal.use_ema=true")["exported"]
    assert (exported["micro_batch"], exported["eval_batch"]) == (4, 4)
    state = int(subprocess.run([sys.executable, "-c", STATE_BYTES, EN_V3], cwd=CHECKOUT, env=env, check=True,
                               capture_output=True, text=True).stdout.split()[-1])
    assert state > plain["weight_bytes"]  # the state holds buffers beside the weights: ModelEMA copies them all
    copies = 3 * plain["weight_bytes"]  # measured: each deep copy of the state is 54,879,504 B, the weights'
    assert exported["peak_bytes"] - plain["peak_bytes"] == pytest.approx(state + copies, rel=0.01)
    assert exported["eval_peaks"]["4"] - plain["eval_peaks"]["4"] > state + copies  # the EMA's weights loaded on top

    characters = (CHECKOUT / "ppocr/utils/en_dict.txt").read_text(encoding="utf-8").split("\n")[:10]
    kept = ("Global.epoch_num", "Global.save_epoch_step", "Global.eval_batch_step")
    options = [*shape, *[option for option in ocr_dataset(tmp_path / "data", train=12, evaluate=4,
                                                          characters=characters) if not option.startswith(kept)],
               *EMA_RUN]
    with_ema, output = client.run_train(CHECKOUT, out, [*options, "Global.use_ema=true"], tmp_path, one_flag=True)
    assert "eval model" in output and "EMA enabled" in output
    without_ema, _ = client.run_train(CHECKOUT, out, options, tmp_path, one_flag=True)
    probed = max(exported["peak_bytes"], exported["eval_peaks"]["4"])
    log_band(probed, with_ema)
    assert with_ema == pytest.approx(probed, rel=0.01)
    assert with_ema - without_ema == pytest.approx(probed - max(plain["peak_bytes"], plain["eval_peaks"]["4"]),
                                                   rel=0.05)


@needs_kit
def test_the_reports_words_are_said_in_the_kits_keys(fake_cli):
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("probe", CHECKOUT / MOBILE, "--device", "cpu", "--budget", "35MiB",
                          "-O", "Train.sampler.first_bs=8")
    assert code == 0, stderr
    assert ("note: in PaddleOCR's keys: m (the micro-batch) is Train.sampler.first_bs (else "
            "Train.loader.batch_size_per_card); k (accumulation) only measures a smaller batch, which PaddleOCR cannot "
            "accumulate: apply writes the largest m that fits; r=0: no block re-run in backward (PaddleOCR has no key "
            "for it; never searched)" in " ".join(stderr.split()))



@needs_kit
def test_a_config_that_evaluates_is_verified_with_the_kits_own_evaluation_after_the_last_step(fake_cli, tmp_path):
    """Issue 36: tools/train.py evaluates right after the 3rd optimizer step (Global.eval_batch_step=[0,3], the
    file's own [0,2000] replaced), the hook reads tools/program.py's eval() apart and ends the run after it; the
    evaluation's peak is said beside the probe's at the exported batch."""
    (tmp_path / "train.txt").write_text("", encoding="utf-8")
    data = [f"Train.dataset.data_dir={tmp_path}", f"Train.dataset.label_file_list=['{tmp_path}/train.txt']"]
    cli, backend = fake_cli(FakeDevice(eval_per_sample=5 * MiB))
    code, _, err = cli("apply", CHECKOUT / MOBILE, "--device", "cpu", "--budget", "64MiB", "-o", tmp_path / "t.yml",
                       "-O", "Train.sampler.first_bs=4", "-O", "Eval.loader.batch_size_per_card=16",
                       *[part for option in data for part in ("-O", option)])
    assert code == 0, err
    [run] = backend.tool_runs
    assert run.eval_batch == 8 and run.env["VRAMTUNE_VERIFY_EVALUATE"] == "tools.program:eval"
    assert [part for part in run.argv if "eval_batch_step" in part] == ["Global.eval_batch_step=[0,3]"]
    assert ("verified by PaddleOCR's tools/train.py: training 28.0 MiB (probe 28.0 MiB, +0.0%), evaluation 60.0 MiB "
            "at batch 8 (probe 60.0 MiB, +0.0%) of 60.8 MiB: fits (1.0s)\n") in err
    assert ("  stopped after 3 optimizer steps and the evaluation that follows them (Global.eval_batch_step=[0,3]), "
            "over the whole Eval set") in err

@needs_kit
@pytest.mark.paddle
@pytest.mark.skipif(not client.has_requirements("PaddleOCR"), reason=client.missing_reason("PaddleOCR"))
@pytest.mark.slow(65)
def test_the_kits_own_train_holds_what_its_dataloader_reads_ahead_as_the_probe_does(tmp_path):
    """en_PP-OCRv3 at batch 8 over 8 batches an epoch, training only: the kit's DataLoader (no workers) holds the 5
    batches it reads ahead at every step from the second (the first with the optimizer's state) as long as 5 are left,
    as on a real dataset; the probe holds them too (at batch 16 they were 0.85% of the peak: without them the probe
    measured 1,433,351,564 B against the kit's 1,445,623,496 B; at batch 8 with them, 833,772,812 B against the kit's
    833,364,296 B)."""
    shape = ["Train.loader.batch_size_per_card=8", "Global.eval_batch_step=[0,100000]"]  # never evaluates
    done = subprocess.run([sys.executable, "-m", "vramtune", "measure", str(CHECKOUT / EN_V3), "--device", "cpu",
                           "--budget", "8GiB", "-m", "8", "--json", *[f"-O{o}" for o in [*shape, NO_WORKERS]]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HUNG,
                          env={**client.child_env(), "VRAMTUNE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    probed = json.loads(done.stdout)["peak_bytes"]
    characters = (CHECKOUT / "ppocr/utils/en_dict.txt").read_text(encoding="utf-8").split("\n")[:10]
    options = [option for option in ocr_dataset(tmp_path / "data", train=8 * 8, evaluate=4, characters=characters)
               if not option.startswith("Global.eval_batch_step")]
    peak, _ = client.run_train(CHECKOUT, CHECKOUT / EN_V3, [*shape, *options], tmp_path, one_flag=True)
    log_band(probed, peak)
    assert peak == pytest.approx(probed, rel=0.005)
