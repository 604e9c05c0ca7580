"""Every exported file loads in the user's own parser as it is, and trains what was measured.

The choices are fixed by fake devices (deterministic physics, no CPU timing): partial recompute is chosen, then
exported as itself where the format can say it (an arguments file for the llm scripts) and as the nearest measured
configuration the format can say where it cannot (TrainingArguments for a Trainer script of the user's own). The
files are read by PaddleNLP's own PdArgumentParser with its default settings (unknown keys refused)."""
from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import make_dataclass
from typing import Optional

import pytest
from conftest import SPECS, mlp_spec, needs_paddlenlp
from fakes import FakeDevice, MiB

from vramtune.dialects.paddlenlp.keys import (
    DATA_ARGUMENTS,
    GENERATE_ARGUMENTS,
    LLM_TRAINING_ARGUMENTS,
    MODEL_ARGUMENTS,
    QUANT_ARGUMENTS,
)

pytestmark = [pytest.mark.paddle, needs_paddlenlp]


def trainer_parser():
    import scipy  # noqa: F401  on Paddle 2.6, scipy before paddle (PaddleNLP imports both)
    from paddlenlp.trainer import PdArgumentParser, TrainingArguments

    return PdArgumentParser(TrainingArguments)


# the types the llm scripts' dataclasses give the keys vramtune writes or these tests read (PaddleNLP 2.8.1,
# llm/utils/argument.py); argparse converts a JSON file's values by them
LLM_TYPES = {"model_name_or_path": str, "recompute_granularity": str, "no_recompute_layers": Optional[list[int]],
             "lora": bool, "lora_rank": int, "prefix_tuning": bool, "num_prefix_tokens": int, "max_length": int}


def llm_parser():
    """The llm scripts' parser: PdArgumentParser over their model, data, quantization and generation dataclasses
    and their TrainingArguments (PaddleNLP's, with the fields their subclass adds). Those dataclasses live in
    PaddleNLP's repository, not in its wheel: they are rebuilt here from their field names (spec/paddlenlp_keys.py,
    read from 2.8.1's llm/) with the types above, which is what PdArgumentParser checks a file against."""
    import scipy  # noqa: F401
    from paddlenlp.trainer import PdArgumentParser, TrainingArguments

    def arguments(name: str, keys: tuple[str, ...]) -> type:
        return make_dataclass(name, [(key, LLM_TYPES.get(key, Optional[str]), dataclasses.field(default=None))
                                     for key in keys])

    return PdArgumentParser((arguments("ModelArgument", MODEL_ARGUMENTS), arguments("DataArgument", DATA_ARGUMENTS),
                             arguments("QuantArgument", QUANT_ARGUMENTS),
                             arguments("GenerateArgument", GENERATE_ARGUMENTS),
                             make_dataclass("TrainingArguments", [(key, Optional[str], dataclasses.field(default=None))
                                                                  for key in LLM_TRAINING_ARGUMENTS],
                                            bases=(TrainingArguments,))))


def wrapper_recompute_device() -> FakeDevice:
    """The MLP's physics (6 blocks recomputed by vramtune's wrapper; limit 38 MiB): plain fits up to micro-batch
    256; larger micro-batches need 2 to 5 blocks recomputed and are faster (1 s per micro-step); no AMP (a CPU)."""
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 120, blocks=6, overhead=1.0,
                      amp_unsupported={"fp16": "not on this CPU", "bf16": "not on this CPU"})


@dataclasses.dataclass
class NativeRecomputeDevice(FakeDevice):
    """A PaddleNLP Llama's facts: its own recompute, r of L layers through no_recompute_layers."""

    def result(self, s, budget):
        result = super().result(s, budget)
        facts = {**result.facts, "recompute_options": {"granularities": ["full", "full_attn", "core_attn"],
                                                       "partial": True}}
        return dataclasses.replace(result, facts=facts)


def probe_and_apply(cli, spec, *flags, format_name=None):
    code, out, err = cli("probe", spec, "--json", *flags)
    assert code == 0, err
    report = json.loads(out)
    out_path = spec.with_name("exported.json")
    code, out, err = cli("apply", spec, "-o", out_path, "--json", *flags, *(["--format", format_name] if format_name else []))
    assert code == 0, err
    return report, json.loads(out), out_path, err


def label(result: dict) -> str:
    return f"m={result['micro_batch']} k={result['accumulation']} r={result['recomputed_blocks']}"


def test_partial_recompute_by_the_wrapper_exports_the_fastest_measured_plain_configuration(fake_cli, write_spec):
    cli, _ = fake_cli(wrapper_recompute_device())
    spec = write_spec(mlp_spec())
    report, applied, path, err = probe_and_apply(cli, spec, format_name="paddlenlp")
    chosen, exported = report["chosen"], applied["exported"]
    assert 0 < chosen["recomputed_blocks"] < 6, chosen  # the fixed physics make partial recompute the fastest
    plain = [p for p in report["probes"] if p["status"] == "fits" and p["recomputed_blocks"] == 0]
    fastest_plain = max(plain, key=lambda p: p["samples_per_sec"])
    assert label(exported) == label(fastest_plain) and exported["status"] == "fits"
    assert exported["peak_bytes"] == fastest_plain["peak_bytes"] <= report["limit_bytes"]
    assert applied["exported_instead_because"].startswith(
        f"recompute of {chosen['recomputed_blocks']} of 6 blocks ran through vramtune's wrapper")
    assert f"warning: exported {exported['precision']} {label(exported)}/6 (" in err
    assert f"instead of the chosen {chosen['precision']} {label(chosen)}/6 (" in err

    text = path.read_text()
    (args,) = trainer_parser().parse_json_file(str(path))  # as it is: unknown keys would be refused
    assert "_vramtune_comment" not in text
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.recompute) == (
        exported["micro_batch"], exported["accumulation"], False)


def test_an_llm_models_partial_recompute_is_written_back_as_measured_and_loads_in_the_llm_parser(
        fake_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(SPECS / "tiny-llama", tmp_path / "tiny-llama")
    spec = tmp_path / "args.json"
    original = {"model_name_or_path": "./tiny-llama", "output_dir": "./checkpoints", "per_device_train_batch_size": 1024,
                "gradient_accumulation_steps": 2, "max_length": 256, "learning_rate": 3e-5,
                "no_recompute_layers": [0, 1, 2, 3, 4, 5], "warmup_steps": 10}
    spec.write_text(json.dumps(original, indent=4))
    cli, _ = fake_cli(NativeRecomputeDevice(per_sample=MiB / 20, saved=MiB / 120, blocks=6, overhead=1.0))
    report, applied, path, err = probe_and_apply(cli, spec, "--device", "cpu", "--budget", "40MiB",
                                                 "--max-accumulation", "2")
    chosen = report["chosen"]
    assert 0 < chosen["recomputed_blocks"] < 6 and label(applied["exported"]) == label(chosen), chosen
    model, _, _, _, training = llm_parser().parse_json_file(str(path))
    assert (training.recompute, model.recompute_granularity) == (True, "full")
    assert model.no_recompute_layers == list(range(chosen["recomputed_blocks"], 6))
    assert training.per_device_train_batch_size == chosen["micro_batch"] and model.model_name_or_path == "./tiny-llama"
    assert applied["warnings"] == [] and "instead of" not in err
    written = json.loads(path.read_text())  # the user's file, only the tuned values changed, its layout kept
    assert {key: value for key, value in written.items() if key in original} == {
        **original, "per_device_train_batch_size": chosen["micro_batch"],
        "gradient_accumulation_steps": chosen["accumulation"], "no_recompute_layers": model.no_recompute_layers}
    assert list(written)[:len(original)] == list(original) and '\n    "warmup_steps": 10' in path.read_text()
    trainer = tmp_path / "trainer.json"  # the same choice for a Trainer script: every layer, as the search measured
    code, out, err = cli("apply", spec, "--device", "cpu", "--budget", "40MiB", "--max-accumulation", "2",
                         "--format", "paddlenlp", "-o", trainer, "--json")
    assert code == 0 and json.loads(out)["exported"]["recomputed_blocks"] == 6, err
    assert "(for the chosen one: --format arguments, for PaddleNLP's llm scripts)" in err
    (args,) = trainer_parser().parse_json_file(str(trainer))
    assert (args.recompute, args.per_device_train_batch_size) == (True, chosen["micro_batch"])


def test_an_llm_models_partial_recompute_for_a_trainer_exports_every_layer_recomputed_as_measured(fake_cli,
                                                                                                   write_spec):
    # micro-batch 1024 at least (max_accumulation 2): nothing fits without recompute; TrainingArguments cannot say
    # no_recompute_layers, so the file recomputes every layer, at the micro-batch the search measured it
    cli, _ = fake_cli(NativeRecomputeDevice(per_sample=MiB / 20, saved=MiB / 120, blocks=6, overhead=1.0))
    spec = write_spec(mlp_spec(**{"search.max_accumulation": 2}))
    report, applied, path, err = probe_and_apply(cli, spec, format_name="paddlenlp")
    chosen, exported = report["chosen"], applied["exported"]
    assert 0 < chosen["recomputed_blocks"] < 6, chosen
    assert label(exported) == label({**chosen, "recomputed_blocks": 6}) and exported["status"] == "fits"
    assert label(exported) in {label(p) for p in report["probes"]}  # measured by the search: no probe more
    assert applied["exported_instead_because"] == (
        f"recompute of {chosen['recomputed_blocks']} of 6 blocks needs no_recompute_layers: "
        f"{json.dumps(list(range(chosen['recomputed_blocks'], 6)))}, which this parser does not read")
    (args,) = trainer_parser().parse_json_file(str(path))
    assert (args.recompute, args.per_device_train_batch_size) == (True, chosen["micro_batch"])
    assert "no_recompute_layers" not in path.read_text() and "measuring" not in err


def test_nothing_the_format_can_say_fits_exits_1_and_writes_nothing(fake_cli, write_spec):
    cli, _ = fake_cli(wrapper_recompute_device())
    spec = write_spec(mlp_spec(**{"search.max_accumulation": 2}))  # micro-batch 1024 at least: plain never fits
    path = spec.with_name("trainer.json")
    code, _, err = cli("apply", spec, "--format", "paddlenlp", "-o", path)
    assert code == 1 and not path.exists()
    assert err.rstrip().splitlines()[-1].startswith("error: --format paddlenlp: recompute of ")
    assert err.rstrip().endswith("no measured configuration that the format can say fits the budget (for the chosen "
                                 "one: --format yaml, trained with vramtune.runtime)")


def test_the_keys_written_for_a_trainer_are_trainingarguments_fields():
    """The table's TrainingArguments are the dataclass's fields exactly; the llm scripts' subclass adds its own."""
    import scipy  # noqa: F401
    from paddlenlp.trainer import TrainingArguments

    from vramtune.dialects.paddlenlp.export import ACCEPTED

    fields = {field.name for field in dataclasses.fields(TrainingArguments) if field.init}
    assert fields == ACCEPTED
    assert not fields & set(LLM_TRAINING_ARGUMENTS)
