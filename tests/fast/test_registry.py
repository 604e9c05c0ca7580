"""The registry is the whole contract: a mechanism written here, in a test file, is read from the spec, searched,
chosen, labelled, flagged, exported and estimated with no edit under vramtune/."""
from __future__ import annotations

import dataclasses
import json
from typing import ClassVar

import pytest
from conftest import SPECS, mlp_spec
from fakes import FakeDevice, MiB

from vramtune.mechanisms import Field, Mechanism, register, unregister
from vramtune.search import roles


class HalfActivations(Mechanism):
    """Keeps half of each sample's activations (say, offloaded to the host) at a speed cost: an axis of the search."""

    name = "half_activations"
    fields = (Field("half_activations", bool, False, "--half-activations", "-H", "keep half the activations"),)

    def read(self, spec) -> bool:
        return spec.search.get("half_activations", str, "auto", choices=("auto", "off")) != "off"

    def label(self, strategy, facts) -> str:
        return "half" if strategy.half_activations else ""

    def weight(self, strategy) -> int:
        return int(strategy.half_activations)

    def memory_term(self, strategy) -> float:
        return -float(strategy.micro_batch) if strategy.half_activations else 0.0  # saves c bytes per sample

    def levels(self, plain, search):
        return [plain.with_(half_activations=True), plain] if search.settings(self.name) else []

    def to_arguments(self, tuned):
        return {"half_activations": tuned.strategy.half_activations}, []


@dataclasses.dataclass
class HalvingDevice(FakeDevice):
    """The fake device knows the new mechanism's physics: half the activation bytes, 20% slower per sample."""

    def peak(self, s):
        return super().peak(s) - (s.micro_batch * self.per_sample / 2 if s.half_activations else 0.0)

    def speed(self, s):
        return super().speed(s) * (0.8 if s.half_activations else 1.0)


@pytest.fixture
def half_activations(monkeypatch):
    register(HalfActivations())
    monkeypatch.setattr(roles, "AXES", [*roles.AXES, "half_activations"])
    yield
    unregister("half_activations")


def test_a_mechanism_from_a_test_file_is_searched_and_chosen(half_activations, fake_cli, write_spec):
    # no repeated blocks (no recompute), max_accumulation 8: the smallest micro-batch is 256, whose 20 + 256 x 0.1
    # = 45.6 MiB does not fit 38 MiB; with half the activations, 32.8 MiB does
    device = HalvingDevice(per_sample=MiB / 10, blocks=0, overhead=0.0)
    cli, backend = fake_cli(device)
    spec = write_spec(mlp_spec(**{"search.max_accumulation": 8, "search.half_activations": "auto"}))
    code, out, err = cli("probe", spec, "--json")
    assert code == 0, err
    report = json.loads(out)
    chosen = report["chosen"]
    assert chosen["half_activations"] is True and chosen["micro_batch"] == 256, chosen
    assert chosen["peak_bytes"] <= report["limit_bytes"]
    assert any(p["rung"] == "half_activations" for p in report["probes"])
    assert "fp32 m=256 k=8 r=0 half" in err  # its label, in the probe table
    code, out, err = cli("apply", spec, "-o", "-", "--format", "paddlenlp")  # not a TrainingArguments key: said
    assert code == 0 and "half_activations" not in json.loads(out) and "half_activations: true (measured so" in err
    code, out, _ = cli("measure", spec, "-m", 256, "--half-activations", "--json")
    assert code == 0 and json.loads(out)["half_activations"] is True and backend.jobs[-1].strategy["half_activations"]


def test_its_spec_key_is_validated_and_off_means_not_searched(half_activations, fake_cli, write_spec):
    cli, backend = fake_cli(HalvingDevice(per_sample=MiB / 10, blocks=0, overhead=0.0))
    code, _, err = cli("validate", write_spec(mlp_spec(**{"search.half_activations": "sometimes"})))
    assert code == 2 and "search.half_activations: must be one of auto, off; got 'sometimes'" in err
    code, _, _ = cli("probe", write_spec(mlp_spec(**{"search.max_accumulation": 8,
                                                        "search.half_activations": "off"})), "--json")
    assert code == 1 and not any(job.strategy["half_activations"] for job in backend.jobs)


class EmaWeights(Mechanism):
    """Keeps an fp32 moving average of the trainable weights beside them (as PaddleOCR's EMA): 4 more bytes per
    trainable parameter on every rank, which only the estimate's counted state knows of."""

    name = "ema_weights"
    fields = (Field("ema", bool, True, "--ema", "-E", "keep an EMA of the weights"),)
    state_parts: ClassVar[dict[str, str]] = {"ema": "EMA weights"}

    def counted_state(self, state, strategy, counts, given):
        return {**state, "ema": 4 * counts.trainable if strategy.ema else 0}

    def column(self, strategy, facts):
        return "EMA", "on" if strategy.ema else "off"

    def phrase(self, strategy, facts):
        return ("memory", "an EMA of the weights") if strategy.ema else None


def _estimate(cli, *arguments) -> tuple[dict, str]:
    code, out, err = cli("estimate", *arguments, "--json")
    assert code == 0, err
    return json.loads(out), err


def _heading(err: str) -> str:
    return next(line for line in err.splitlines() if "largest fitting" in line)


def test_a_mechanism_from_a_test_file_is_estimated_and_shown(fake_cli, write_spec):
    """The estimate asks the registry for each rank's counted state, its table's columns, the best's words and what
    fills its peak: a mechanism registered here adds its bytes to every row of both estimates (a model's config.json,
    a spec's CPU probes), counted from the trainable parameters, and is shown."""
    cli, _ = fake_cli(FakeDevice(fixed=20 * MiB, per_sample=MiB / 20, blocks=6))
    model = (SPECS / "formers" / "llama", "--card", "1GiB", "--devices", "2")
    spec = (write_spec(mlp_spec()), "--card", "64MiB")
    (answer, _), (estimate, _) = _estimate(cli, *model), _estimate(cli, *spec)
    register(EmaWeights())
    try:
        (answer_ema, answer_err), (estimate_ema, estimate_err) = _estimate(cli, *model), _estimate(cli, *spec)
    finally:
        unregister("ema_weights")
    for fine_tuning in ("LoRA", "full"):
        trainable = answer[fine_tuning]["counts"]["trainable"]
        rows, rows_ema = answer[fine_tuning]["rows"], answer_ema[fine_tuning]["rows"]
        assert len(rows) == len(rows_ema) > 1
        for row, row_ema in zip(rows, rows_ema):
            assert "ema" not in row and row_ema["ema"] == 4 * trainable
            assert row_ema["peak_bytes"] - row["peak_bytes"] == 4 * trainable
    trainable = estimate_ema["counts"]["trainable"]
    assert len(estimate["rows"]) == len(estimate_ema["rows"]) > 1
    for row, row_ema in zip(estimate["rows"], estimate_ema["rows"]):
        assert row_ema["peak_bytes"] - row["peak_bytes"] == row_ema["ema"] == 4 * trainable > 0
    for err in (answer_err, estimate_err):
        assert "┃ EMA ┃" in _heading(err)
        assert ", an EMA of the weights; peak " in err and ", EMA weights " in err
