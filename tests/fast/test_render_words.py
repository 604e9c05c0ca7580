"""The one-line answer and `measure`'s lines (render/words.py, naming the Strategy fields and fact keys): the words
stay exactly what they were when each mechanism said its own."""
from __future__ import annotations

from types import SimpleNamespace

from conftest import mlp_spec
from fakes import FakeDevice

from vramtune.core.records import ProbeResult
from vramtune.core.strategy import Strategy
from vramtune.render.tuning import choice_line
from vramtune.render.words import chosen_lines

MiB = 2**20


def test_the_choice_line_in_every_mechanism_s_words():
    strategy = Strategy(precision="bf16", micro_batch=4, accumulation=2, devices=2, sharding_stage=1,
                        recomputed_blocks=3, recompute_granularity="core_attn")
    chosen = ProbeResult("measured", strategy, peak_bytes=300 * MiB, samples_per_sec=12.34,
                         facts={"total_blocks": 6})
    report = SimpleNamespace(chosen=chosen, limit=400 * MiB, target_batch=16,
                             budget=SimpleNamespace(bytes=500 * MiB, headroom=0.2))
    assert choice_line(report) == (
        "chosen: bf16, micro-batch 4 x accumulation 2 x 2 devices = 16, recompute 3/6 blocks (core_attn), "
        "sharding stage 1; peak 300.0 MiB of 400.0 MiB (75%; budget 500.0 MiB less 20% headroom), 12.3 samples/s")
    plain = ProbeResult("measured", Strategy(micro_batch=8), peak_bytes=100 * MiB, samples_per_sec=5.0)
    assert choice_line(SimpleNamespace(**{**vars(report), "chosen": plain, "target_batch": 8})).startswith(
        "chosen: fp32, micro-batch 8 x accumulation 1 = 8; peak 100.0 MiB")  # nothing recomputed: not said


def test_measure_says_the_repeated_blocks_found(fake_cli, write_spec):
    cli, _ = fake_cli(FakeDevice(blocks=6))
    code, out, err = cli("measure", write_spec(mlp_spec(), "mlp.yaml"), "-m", 8)
    assert code == 0 and "\n  repeated blocks found: 6\n" in out + err, out + err


def test_a_chosen_result_says_what_peft_trains():
    facts = {"peft": {"lora": {"rank": 8, "alpha": None}, "prefix_tokens": 16}, "trainable_params": 1_234,
             "total_params": 100_000}
    assert chosen_lines(ProbeResult("measured", Strategy(), facts=facts)) == [
        "prefix tuning (16 tokens) + LoRA r=8: 1,234 of 100,000 parameters trained (1.23%)"]
    lora = {**facts, "peft": {"lora": {"rank": 4}, "prefix_tokens": None}}
    assert chosen_lines(ProbeResult("measured", Strategy(), facts=lora)) == [
        "LoRA r=4: 1,234 of 100,000 parameters trained (1.23%)"]
    assert chosen_lines(ProbeResult("measured", Strategy(), facts={})) == []
