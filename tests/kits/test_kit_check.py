"""`vramtune check` on a kit's config that `apply` wrote (no tuned: section) over a fake device (no Paddle): it
measures the strategy apply chose, read back from the kit's own keys (batch, update_freq, AMP)."""
from __future__ import annotations

import json

import kit_client as client
import pytest
from fakes import FakeDevice, MiB

CLAS = client.kit("PaddleClas")
VIT = "ppcls/configs/ImageNet/VisionTransformer/ViT_base_patch16_224.yaml"


def vit_checkout(fake_cli, tmp_path):
    """A PaddleClas checkout of symlinks holding the ViT config as the user's own file, and a fake GPU CLI."""
    checkout = tmp_path / "PaddleClas"
    checkout.mkdir()
    for part in ("ppcls", "tools"):
        (checkout / part).symlink_to(CLAS / part)
    mine = checkout / "vit.yaml"
    mine.write_text((CLAS / VIT).read_text())
    cli, backend = fake_cli(FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5,
                                       amp_speed=2.0))
    return checkout, mine, cli, backend


@pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
def test_check_measures_the_batch_accumulation_and_amp_apply_wrote(fake_cli, tmp_path):
    checkout, mine, cli, backend = vit_checkout(fake_cli, tmp_path)
    out = checkout / "vit.tuned.yml"
    code, said, err = cli("apply", mine, "--budget", "35MiB", "-o", out, "--json")
    assert code == 0, err
    chosen = {key: json.loads(said)["chosen"][key] for key in ("precision", "micro_batch", "accumulation")}
    assert chosen == {"precision": "fp16", "micro_batch": 8, "accumulation": 8}  # the file said fp32 64 x 1
    code, said, err = cli("check", out, "--budget", "35MiB", "--json")
    assert code == 0, err
    assert err.startswith("note: the file's strategy: fp16 m=8 k=8 r=0 (--budget 35.0 MiB)\n")
    assert {key: backend.jobs[-1].strategy[key] for key in chosen} == chosen
    code, said, err = cli("check", out, "--budget", "20MiB")
    assert code == 1 and err.endswith("check: fail\n")


@pytest.mark.skipif(CLAS is None, reason=f"no PaddleClas checkout in {client.KITS}")
def test_check_takes_the_overrides_apply_took_and_its_budget_line_names_them(fake_cli, tmp_path):
    checkout, mine, cli, backend = vit_checkout(fake_cli, tmp_path)
    out = checkout / "vit.tuned.yml"
    code, _, err = cli("apply", mine, "--budget", "35MiB", "-o", out, "-O", "Arch.class_num=10",
                          "-O", "Global.eval_during_train=False")
    assert code == 0, err
    given = ["Arch.class_num=10", "Global.eval_during_train=False"]
    assert out.read_text().splitlines()[0] == (
        "# vramtune: tuned for a budget of 35.0 MiB (36700160 bytes); `vramtune check FILE -O Arch.class_num=10 "
        "-O Global.eval_during_train=False` gates it in CI")
    code, _, err = cli("check", out)  # without them: the config's default job
    assert code == 0 and backend.jobs[-1].model["options"] == []
    code, _, err = cli("check", out, "-O", "Arch.class_num=10", "Global.eval_during_train=False")
    assert code == 0 and err.startswith("note: the file's strategy: fp16 m=8 k=8 r=0 (the budget it records "
                                        "35.0 MiB)\n")
    job = backend.jobs[-1]
    assert (job.model["config"], job.model["options"]) == (str(out), given)
    assert (job.strategy["precision"], job.strategy["micro_batch"], job.strategy["accumulation"]) == ("fp16", 8, 8)


BASE_BATCH = [  # a batch only a base file says, or an override sets: the file itself says none or another
    ("PaddleSeg", "configs/fcn/fcn_hrnetw18_cityscapes_1024x512_80k.yml", [], 2),  # _base_/cityscapes.yml
    ("PaddleSeg", "configs/fcn/fcn_hrnetw18_cityscapes_1024x512_80k.yml", ["batch_size=8"], 8),
    ("PaddleDetection", "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml", [], 8),  # _base_/ppyoloe_plus_reader.yml
    ("PaddleDetection", "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml", ["TrainReader.batch_size=3"], 3),
]


@pytest.mark.parametrize(("kit", "config", "options", "batch"), BASE_BATCH,
                         ids=[f"{kit}-{'-'.join(options) or 'base'}" for kit, _, options, _ in BASE_BATCH])
def test_check_and_measure_read_a_batch_from_the_base_files_or_the_overrides(fake_cli, kit, config, options, batch):
    """The shipped configs as they are, no -m/-k: a verdict (exit 0 or 1), not exit 2 (the round trip through
    apply's writer could not read them: it would write the batch into the file)."""
    if client.kit(kit) is None:
        pytest.skip(f"no {kit} checkout in {client.KITS}")
    path, flags = client.kit(kit) / config, [f"-O{option}" for option in options]
    cli, backend = fake_cli(FakeDevice())  # 20 MiB of state, 2 MiB a sample
    stated = f"fp32 m={batch} k=1 r=0"
    code, _, err = cli("check", path, "--budget", "64MiB", *flags)
    assert code == 0 and f"\nnote: the file's strategy: {stated} (--budget 64.0 MiB)\n" in err, err
    assert err.endswith("check: pass\n") and backend.jobs[-1].strategy["micro_batch"] == batch
    assert backend.jobs[-1].model["options"] == options
    code, _, err = cli("check", path, "--budget", "20MiB", *flags)
    assert code == 1 and err.endswith("check: fail\n"), err
    code, _, err = cli("measure", path, "--budget", "64MiB", *flags)
    assert code == 0 and f"\nnote: the file's strategy: {stated}\n{stated}: fits\n" in err, err
