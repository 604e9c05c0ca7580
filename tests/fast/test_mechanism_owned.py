"""What a mechanism owns and its callers ask it (issue 28): the exact words and values the callers had when they named
the mechanism themselves, now that the registry answers them (test_mechanism_names.py counts the names)."""
from __future__ import annotations

import pytest
import yaml
from conftest import mlp_spec

from vramtune.core.reading import SpecError
from vramtune.core.records import Device
from vramtune.doctor.base import CheckRun
from vramtune.doctor.device import CHECK
from vramtune.spec import load_spec
from vramtune.spec.files import require_tuned

GPU_FIGURES = {"paddle": "3.3.1", "cuda_build": True, "cuda": "12.6", "cudnn": "9.5", "capability": "7.5"}
FIGURE = "Tesla T4 (compute capability 7.5), 15.0 GiB, 1 GPU(s); Paddle 3.3.1, CUDA 12.6, cuDNN 9.5; "


@pytest.mark.parametrize(("unsupported", "said"), [
    ({}, "fp16 and bf16 AMP supported"),
    ({"bf16": "Tesla T4 has no bf16 support (needs compute capability 8.0+)"},
     "Tesla T4 has no bf16 support (needs compute capability 8.0+)"),
])
def test_the_doctors_device_line_says_what_amp_the_card_runs(unsupported, said):
    device = Device("gpu", 0, "Tesla T4", 15 << 30, "3.3.1", unsupported)
    verdict = CHECK.judge({"": CheckRun("measured", {**GPU_FIGURES, "device": device.to_json()})}, None)
    assert (verdict.status, verdict.figure) == ("pass", FIGURE + said)


def test_a_tuned_section_of_vramtune_0_1_is_refused_by_name(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(mlp_spec(tuned={"recompute_layers": 2, "micro_batch": 4, "accumulation": 2})))
    with pytest.raises(SpecError) as raised:
        require_tuned(load_spec(path))
    assert str(raised.value).endswith("tuned: was written by vramtune 0.1 (recompute_layers); rerun `vramtune apply` "
                                      "to rewrite it")


def test_architecture_names_every_member_of_the_mechanism_protocols():
    """ARCHITECTURE.md's "Mechanisms" lists what a mechanism can declare: every member of its four protocols."""
    from conftest import ROOT

    from vramtune.mechanisms import base

    members = [name for protocol in (base.Declaration, base.MemoryEffect, base.SearchRole, base.Runtime)
               for name in vars(protocol) if not name.startswith("__")]
    listed = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(members) > 20 and [name for name in members if f"`{name}" not in listed] == []
