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
