"""The kit dialects through the CLI over a fake device (no Paddle): the kit's overrides, the search's choice written
back into the user's own config, what apply says, and bad input."""
from __future__ import annotations

import json

import kit_client as client
import pytest
import yaml
from fakes import FakeDevice, MiB
from test_paddleclas import diff

OCR, CLAS = client.kit("PaddleOCR"), client.kit("PaddleClas")
MOBILE = "configs/rec/PP-OCRv5/PP-OCRv5_mobile_rec.yml"
VIT = "ppcls/configs/ImageNet/VisionTransformer/ViT_base_patch16_224.yaml"


@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
def test_apply_moves_the_anchored_first_bs_and_says_what_the_kit_cannot_do(fake_cli, tmp_path):
    cli, backend = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    out = tmp_path / "rec.yml"
    code, _, stderr = cli("apply", OCR / MOBILE, "--device", "cpu", "--budget", "35MiB", "-o", out,
                          "-O", "Train.sampler.first_bs=8")
    assert code == 0, stderr
    assert backend.jobs[0].model["options"] == ["Train.sampler.first_bs=8"]
    assert diff(OCR / MOBILE, out) == [
        "+# vramtune: tuned for a budget of 35.0 MiB (36700160 bytes); `vramtune check FILE` gates it in CI",
        "-    first_bs: &bs 128", "+    first_bs: &bs 6"]  # every batch up to 8 tried (4 when only divisors were)
    assert yaml.safe_load(out.read_text())["Train"]["loader"]["batch_size_per_card"] == 6
    said = " ".join(stderr.split())
    assert "Train.loader.batch_size_per_card changed too: they alias an anchored key that was tuned" in said
    assert "the effective batch falls from 8 to 6 per card" in said and "x0.75 here" in said
    assert ("chosen: fp32, batch 6, below the target 8 (this loop cannot accumulate: it trains 6 samples a step); "
            "peak 32.0 MiB") in said  # before: "micro-batch 4 x accumulation 2 = 8" for the batch 4 it trains
    assert "-o Train.sampler.first_bs=8: tuned in the file now" in said
    assert f"cd {OCR.resolve()} && python tools/train.py -c {out.resolve()}" in said  # the checkout as found: resolved


@pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
def test_paddleclas_keeps_its_effective_batch_with_update_freq(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    out = tmp_path / "vit.yaml"
    code, _, stderr = cli("apply", CLAS / VIT, "--device", "cpu", "--budget", "35MiB", "-o", out,
                          "-O", "DataLoader.Train.sampler.batch_size=8", "-O", "Global.epochs=1")
    assert code == 0, stderr
    assert diff(CLAS / VIT, out) == [  # the tuned batch size is in the file now: only the other -O for check
        "+# vramtune: tuned for a budget of 35.0 MiB (36700160 bytes); `vramtune check FILE -O Global.epochs=1` "
        "gates it in CI",
        "+  update_freq: 2", "-      batch_size: 64", "+      batch_size: 4"]
    assert f"python tools/train.py -c {out.resolve()} -o Global.epochs=1" in " ".join(stderr.split())


@pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
def test_bad_overrides_and_formats_are_bad_input(fake_cli, tmp_path):
    cli, backend = fake_cli(FakeDevice())
    code, _, stderr = cli("probe", CLAS / VIT, "--budget", "1GiB", "-O", "Global.epochs")
    assert code == 2 and "override 'Global.epochs': must be Key=value" in stderr
    code, _, stderr = cli("apply", CLAS / VIT, "--budget", "1GiB", "--format", "yaml", "-o", tmp_path / "x.yaml")
    assert code == 2 and "--format kit writes a kit's config back" in " ".join(stderr.split())
    assert not backend.jobs


@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
def test_a_kit_that_cannot_accumulate_gets_the_largest_batch_that_fits(fake_cli, tmp_path):
    """Small batches run faster here (as on a CPU), but PaddleOCR would train one as a smaller effective batch: the
    search does not walk down to them (before: it probed m=2 k=4 and chose it, and apply exported 4 instead), and
    every batch up to the target is tried, so apply writes the largest that fits, 6."""
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB, small_batch_bonus=0.5))
    out = tmp_path / "rec.yml"
    code, stdout, stderr = cli("apply", OCR / MOBILE, "--device", "cpu", "--budget", "35MiB", "-o", out, "--json",
                               "--precision", "fp32", "-O", "Train.sampler.first_bs=8")
    assert code == 0, stderr
    answer = json.loads(stdout)
    assert answer["exported"]["micro_batch"] == answer["chosen"]["micro_batch"] == 6
    assert "throughput" not in stderr and "exported batch" not in stderr
    assert diff(OCR / MOBILE, out) == [
        "+# vramtune: tuned for a budget of 35.0 MiB (36700160 bytes); `vramtune check FILE` gates it in CI",
        "-    first_bs: &bs 128", "+    first_bs: &bs 6"]


@pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
def test_amp_chosen_for_a_config_without_an_amp_section_writes_the_section(fake_cli, tmp_path):
    config = yaml.safe_load((CLAS / VIT).read_text())
    del config["AMP"]
    _, mine = client.user_clas_checkout(tmp_path, CLAS, "vit.yaml", yaml.safe_dump(config, sort_keys=False))
    cli, _ = fake_cli(FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5, amp_speed=2.0))
    out = tmp_path / "tuned.yaml"
    code, _, stderr = cli("apply", mine, "--budget", "35MiB", "-o", out, "-O", "DataLoader.Train.sampler.batch_size=8")
    assert code == 0, stderr
    tuned = yaml.safe_load(out.read_text())
    assert tuned["AMP"]["use_amp"] is True and tuned["AMP"]["level"] in ("O1", "O2")
    assert tuned["AMP"]["scale_loss"] == 128.0 and tuned["AMP"]["use_dynamic_loss_scaling"] is True


@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
def test_an_override_whose_value_is_not_yaml_is_bad_input(fake_cli):
    cli, backend = fake_cli(FakeDevice())
    code, _, stderr = cli("probe", OCR / MOBILE, "--budget", "1GiB", "-O", "Global.epoch_num=[oops")
    assert code == 2, stderr
    assert "override 'Global.epoch_num=[oops': its value does not parse as the kit reads it" in " ".join(stderr.split())
    assert not backend.jobs


@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
def test_an_override_of_a_key_that_moved_with_the_anchor_is_not_passed_again(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    out = tmp_path / "rec.yml"
    code, _, stderr = cli("apply", OCR / MOBILE, "--device", "cpu", "--budget", "35MiB", "-o", out,
                          "-O", "Train.sampler.first_bs=8", "-O", "Train.loader.batch_size_per_card=8",
                          "-O", "Global.epoch_num=1")
    assert code == 0, stderr
    said = " ".join(stderr.split())
    assert "-o Train.sampler.first_bs=8 -o Train.loader.batch_size_per_card=8: tuned in the file now" in said
    command = said.split("train the tuned file with the kit: ")[1]
    assert "Global.epoch_num=1" in command and "batch_size_per_card" not in command


@pytest.mark.skipif(OCR is None, reason=f"no PaddleOCR checkout in {client.KITS}")
def test_the_learning_rate_advice_is_per_card_on_several_devices(fake_cli, tmp_path):
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("apply", OCR / MOBILE, "--device", "cpu", "--budget", "35MiB", "--devices", "2",
                          "-o", tmp_path / "rec.yml", "-O", "Train.sampler.first_bs=8")
    assert code == 0, stderr
    assert "the effective batch falls from 8 to 6 per card" in " ".join(stderr.split())


@pytest.mark.skipif(OCR is None or CLAS is None, reason=f"no PaddleOCR or PaddleClas checkout in {client.KITS}")
def test_when_nothing_fits_the_advice_is_in_the_kits_keys(fake_cli):
    """What the kit's config can say (its batch keys) and what vramtune can try (its flags); no recompute, which
    neither kit has."""
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=2 * MiB))
    code, _, stderr = cli("probe", OCR / MOBILE, "--device", "cpu", "--budget", "15MiB", "--precision", "fp32")
    assert code == 1, stderr
    said = [line.strip() for line in stderr.splitlines() if "would fit with" in line]
    assert said[1:] == [
        "would fit with: a smaller micro-batch: lower Train.sampler.first_bs (else Train.loader.batch_size_per_card; "
        "-O, or --target-batch) or raise --max-accumulation (now 64; the smallest micro-batch tried was 2)",
        "would fit with: a shorter sequence / smaller images, or a smaller model"]
    code, _, stderr = cli("probe", CLAS / VIT, "--device", "cpu", "--budget", "15MiB", "--precision", "fp32",
                          "-O", "DataLoader.Train.sampler.batch_size=256")
    said = " ".join(stderr.split())
    assert code == 1 and "lower DataLoader.Train.sampler.batch_size x Global.update_freq (-O, or --target-batch)" \
        " or raise --max-accumulation" in said
    assert "recompute" not in said.replace("r=0", "")


@pytest.mark.skipif(OCR is None or CLAS is None, reason=f"no PaddleOCR or PaddleClas checkout in {client.KITS}")
@pytest.mark.parametrize(("kit", "config", "option", "said"), [
    ("PaddleClas", VIT, "Global.use_dali=True", "Global.use_dali: DALI decodes and augments on the card"),
    ("PaddleOCR", MOBILE, "Global.use_sync_bn=true", "Global.use_sync_bn: SyncBatchNorm is not measured"),
])
def test_a_memory_key_the_probe_does_not_measure_is_bad_input(fake_cli, kit, config, option, said):
    cli, backend = fake_cli(FakeDevice())
    code, _, stderr = cli("probe", client.kit(kit) / config, "--budget", "1GiB", "-O", option)
    assert (code, backend.jobs) == (2, []) and said in " ".join(stderr.split())



SEG = client.kit("PaddleSeg")
OPTIC = "configs/quick_start/pp_liteseg_optic_disc_512x512_1k.yml"  # batch_size 4, the kit's floor 2
SHORTER = "would fit with: a shorter sequence / smaller images, or a smaller model"


@pytest.mark.skipif(SEG is None or CLAS is None, reason=f"no PaddleSeg or PaddleClas checkout in {client.KITS}")
@pytest.mark.parametrize(("kit", "config", "options", "batchnorm", "budget", "said", "floor"), [
    # PaddleSeg's floor 2 with BatchNorm: nothing below it probed (m=1 k=4 was, just over the limit at 22.0 MiB, and
    # the budget advised was the config's batch's, 30905398 bytes); the least measured is at the floor
    ("PaddleSeg", OPTIC, [], 30, "23MiB",
     ["nothing fits 21.8 MiB (budget 23.0 MiB less 5% headroom) at target batch 4.",
      "closest: fp32 m=2 k=2 r=0 peaked at 24.0 MiB, 2.2 MiB over (110% of the limit)",
      "would fit with: a budget of 25.3 MiB (at least 26490342 bytes), under which the closest measured, fp32 m=2 "
      "k=2 r=0, fits", SHORTER], 2),
    # BatchNorm's 16: nothing below it probed (m=8 was, and fit: first named closest, "-2.0 MiB over", with a budget
    # of 39735512 bytes, less than the one given; then m=64's 163357104 bytes, three times what m=16 needs)
    ("PaddleClas", VIT, ["-O", "DataLoader.Train.sampler.batch_size=64"], 50, "40MiB",
     ["nothing fits 38.0 MiB (budget 40.0 MiB less 5% headroom) at target batch 64.",
      "closest: fp32 m=16 k=4 r=0 peaked at 52.0 MiB, 14.0 MiB over (137% of the limit)",
      "would fit with: a budget of 54.8 MiB (at least 57395739 bytes), under which the closest measured, fp32 m=16 "
      "k=4 r=0, fits", SHORTER], 16),
])
def test_when_nothing_fits_the_advice_is_at_the_kits_floor_and_over_the_budget(fake_cli, kit, config, options,
                                                                               batchnorm, budget, said, floor):
    """No probe goes below the kit's floor, the closest miss is measured at it, and the budget it names (in MiB as
    it reads, and in bytes) is more than the one given: with it, a probe chooses a micro-batch at the floor."""
    device = FakeDevice(fixed=20 * MiB, per_sample=2 * MiB, batchnorm_layers=batchnorm)
    cli, backend = fake_cli(device)
    code, _, stderr = cli("probe", client.kit(kit) / config, "--device", "cpu", "--budget", budget,
                          "--precision", "fp32", *options)
    lines = [line.strip() for line in stderr.splitlines()]
    assert code == 1 and lines[-len(said) - 1:-1] == said, stderr
    assert min(job.strategy["micro_batch"] for job in backend.jobs) == floor
    shown = said[2].removeprefix("would fit with: a budget of ").split(" (")[0].replace(" ", "")
    for advised in (shown, said[2].split("at least ")[1].split()[0]):
        cli, _ = fake_cli(device)
        code, stdout, stderr = cli("probe", client.kit(kit) / config, "--device", "cpu", "--budget", advised,
                                   "--precision", "fp32", "--json", *options)
        assert code == 0, stderr
        assert json.loads(stdout)["chosen"]["micro_batch"] == floor
