"""Which measured configuration `apply` exports when the format cannot say the chosen one (no Paddle)."""
from __future__ import annotations

import dataclasses
import json

import pytest
from fakes import FakeDevice, MiB, plan

from vramtune.dialects.paddlenlp.dialect import FORMAT as LLM_SCRIPTS
from vramtune.dialects.paddlenlp.dialect import TRAINING_ARGUMENTS as TRAINER
from vramtune.dialects.spec.dialect import FORMAT as YAML_SPEC
from vramtune.export import expressible

BUDGET = 40 * MiB
NATIVE = {"granularities": ["full", "core_attn"], "partial": True}


def measured(strategy, native=None):
    result = FakeDevice(per_sample=MiB / 20, saved=MiB / 120, blocks=6, small_batch_bonus=1e-3).measure(BUDGET)(strategy)
    if native:
        result = dataclasses.replace(result, facts={**result.facts, "recompute_options": native})
    return result


def test_the_chosen_is_exported_where_the_parser_says_it():
    chosen = measured(plan("fp32", 1024, 2, 4), NATIVE)  # no_recompute_layers: an llm-script key
    assert expressible.exported(chosen, [chosen], LLM_SCRIPTS, 1, measure=None) == expressible.Exported(chosen)
    assert expressible.exported(chosen, [chosen], YAML_SPEC, 1, measure=None) == expressible.Exported(chosen)


def test_with_no_saved_probe_to_stand_in_the_neighbour_is_measured_once():
    chosen = measured(plan("fp32", 1024, 2, 4), NATIVE)
    plain = measured(plan("fp32", 1024, 2), NATIVE)
    assert chosen.fits and not plain.fits
    asked = []

    def measure(strategy):
        asked.append(strategy)
        return measured(strategy, NATIVE)

    exported = expressible.exported(chosen, [chosen, plain], TRAINER, 1, measure)
    assert asked == [plan("fp32", 1024, 2, 6)] and exported.result.strategy == asked[0] and exported.result.fits
    assert exported.why == "recompute of 4 of 6 blocks needs no_recompute_layers: [4, 5], which this parser does not read"
    assert exported.note(chosen, "paddlenlp", "F").endswith("can say and that fits (for the chosen one: F)")
    assert exported.note(chosen, "paddlenlp", "F").startswith(
        f"exported fp32 m=1024 k=2 r=6/6 ({exported.result.samples_per_sec:.1f} samples/s) instead of the chosen "
        f"fp32 m=1024 k=2 r=4/6 ({chosen.samples_per_sec:.1f} samples/s): recompute of 4 of 6 blocks needs")


def test_a_saved_fitting_probe_stands_in_without_measuring_and_the_floor_holds():
    chosen = measured(plan("fp32", 512, 4, 2))  # vramtune's wrapper: no PaddleNLP key says it
    small, smaller = measured(plan("fp32", 256, 8)), measured(plan("fp32", 128, 16))
    assert small.fits and smaller.fits and smaller.samples_per_sec > small.samples_per_sec * 1.05  # CPU caches
    exported = expressible.exported(chosen, [chosen, small, smaller], TRAINER, 256, measure=None)
    assert exported.result is small and exported.why.startswith("recompute of 2 of 6 blocks ran through vramtune's")
    assert expressible.exported(chosen, [chosen, small, smaller], TRAINER, 1, measure=None).result is smaller


def test_nothing_expressible_fits():
    chosen = measured(plan("fp32", 1024, 2, 4))
    with pytest.raises(expressible.NothingExpressible, match="no measured configuration that the format can say"):
        expressible.exported(chosen, [chosen, measured(plan("fp32", 1024, 2))], TRAINER, 1, measure=None)


def test_an_arguments_file_is_edited_in_place_and_a_cleared_key_removed(tmp_path):
    from types import SimpleNamespace

    from vramtune.core.records import Budget
    from vramtune.core.report import Report
    from vramtune.dialects.paddlenlp import arguments_file

    original = '{\n  "model_name_or_path": "./tiny-llama",\n  "no_recompute_layers": [2, 3],\n' \
               '  "per_device_train_batch_size": 8,   "gradient_accumulation_steps": 2\n}\n'
    path = tmp_path / "args.json"
    path.write_text(original)
    every_layer = measured(plan("fp32", 16, 1, 6), NATIVE)
    report = Report(spec="args", spec_path=str(path), device_name="fake cpu", device_kind="cpu", device_bytes=0,
                    paddle_version="0.0-fake", budget=Budget(BUDGET, 0.05), target_batch=16, chosen=every_layer,
                    probes=[every_layer])
    spec = SimpleNamespace(arguments=json.loads(original), train=SimpleNamespace(optimizer="adamw"))
    text, warnings = arguments_file.render(path, spec, report, "TUNED_FILE")
    assert warnings == []
    assert text == ('{\n  "model_name_or_path": "./tiny-llama",\n  "per_device_train_batch_size": 16,   '
                    '"gradient_accumulation_steps": 1,\n  "do_train": true,\n  "fp16": false,\n  "bf16": false,\n'
                    '  "recompute": true,\n  "recompute_granularity": "full",\n  "optim": "adamw",\n'
                    '  "device": "cpu"\n}\n')



def test_no_stage_on_several_ranks_clears_the_stage_the_arguments_file_stated(tmp_path):
    """The file said stage2; the measured choice shards nothing over its 2 ranks: the file must not keep stage2."""
    from types import SimpleNamespace

    from vramtune.core.records import Budget
    from vramtune.core.report import Report
    from vramtune.dialects.paddlenlp import arguments_file

    original = '{\n  "model_name_or_path": "./tiny-llama",\n  "sharding": "stage2",\n  "sharding_parallel_degree": 2,\n' \
               '  "per_device_train_batch_size": 8,\n  "gradient_accumulation_steps": 1\n}\n'
    path = tmp_path / "args.json"
    path.write_text(original)
    plain = measured(plan("fp32", 8, 1).with_(devices=2))
    report = Report(spec="args", spec_path=str(path), device_name="fake cpu", device_kind="cpu", device_bytes=0,
                    paddle_version="0.0-fake", budget=Budget(BUDGET, 0.05), target_batch=16, chosen=plain,
                    probes=[plain])
    spec = SimpleNamespace(arguments=json.loads(original), train=SimpleNamespace(optimizer="adamw"))
    text, _ = arguments_file.render(path, spec, report, "TUNED_FILE")
    assert json.loads(text)["sharding"] == ""

def test_the_faithful_format_names_each_formats_own_tool():
    from vramtune.dialects.base import Format
    from vramtune.plugins import FORMATS

    new = Format("new", ".new", lambda *_: ("", []))
    assert [expressible.faithful_format(FORMATS.get(name, new))
            for name in ("yaml", "arguments", "kit", "paddleformers", "new")] == [
        "--format yaml, trained with vramtune.runtime", "--format arguments, for PaddleNLP's llm scripts",
        "--format kit, for the kit's own tools/train.py", "--format paddleformers, for paddleformers-cli train",
        "--format new"]


def test_a_format_without_accepted_says_everything(fake_cli, monkeypatch, tmp_path):
    from conftest import CONFIGS

    from vramtune import export
    from vramtune.dialects.base import Format
    from vramtune.dialects.spec import export as yaml_spec

    recipe = Format("yaml", ".tuned.yaml", yaml_spec.render)  # a format's three required parts
    monkeypatch.setitem(export.FORMATS, "yaml", recipe)
    invoke, _ = fake_cli(FakeDevice())
    code, _, err = invoke("apply", CONFIGS / "mlp-python-cpu.yaml", "--budget", "64MiB", "-o", tmp_path / "out.yaml")
    assert code == 0, err
    assert "tuned:" in (tmp_path / "out.yaml").read_text()
