"""The kits' codec (dialects/kits/codec.py): the memory keys the kits' configs share, both ways, with the exact
words and values the mechanisms' hooks gave them before the codec held them (issue 35)."""
from __future__ import annotations

import pytest

from vramtune.core.report import Tuned
from vramtune.core.strategy import PRECISIONS, Strategy
from vramtune.dialects.kits.codec import (
    amp_choices,
    batch_only,
    compiled,
    eval_phase,
    evaluated_batch,
    paddle_amp,
    search_off,
    stated_precision,
)


def test_the_kits_shared_keys_in_and_out():
    assert list(search_off({}).items()) == [("recompute", "off"), ("sharding", "off"), ("to_static", "off")]
    assert search_off({"Global": {"to_static": True}}) == {"recompute": "off", "sharding": "off"}
    assert list(batch_only().items()) == [("recompute", "off"), ("sharding", "off"), ("to_static", "off"),
                                          ("precisions", ["fp32"])]
    assert eval_phase(16) == {"evaluation": {"batch": 16, "keep": "loss"}}
    assert amp_choices(("float16",)) == ["fp16-o2", "fp16"]
    assert amp_choices(("float16", "bfloat16")) == ["fp16-o2", "bf16-o2", "fp16", "bf16"]
    assert {p: paddle_amp(Strategy(precision=p)) for p in ("fp32", "fp16", "bf16-o2", "fp16-safe")} == {
        "fp32": ("O0", "float32"), "fp16": ("O1", "float16"), "bf16-o2": ("O2", "bfloat16"),
        "fp16-safe": ("O1", "float16")}
    compiling = Tuned(Strategy(to_static=True), facts={"eval_batch": 12})
    assert (compiled(compiling), evaluated_batch(compiling)) == ({"Global.to_static": True}, 12)
    assert (compiled(Tuned(Strategy())), evaluated_batch(Tuned(Strategy()))) == ({}, None)


@pytest.mark.parametrize("precision", [p for p in PRECISIONS if p != "fp16-safe"])
def test_the_precision_a_kits_amp_keys_state_reads_back_what_they_were_written_for(precision):
    assert stated_precision(*paddle_amp(Strategy(precision=precision))) == precision


def test_amp_keys_without_a_half_type_state_fp32():
    assert stated_precision("O1", "float32") == "fp32"
    assert stated_precision("O0", "float16") == "fp32"
