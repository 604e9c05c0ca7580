"""The ladder and the memory model over a deterministic fake measure function (no Paddle)."""
from __future__ import annotations

import itertools

import pytest

from vramtune.search import MemoryModel, Problem, Tuner, choose
from vramtune.strategy import Strategy

MiB = 2**20


class FakeDevice:
    """peak = fixed + per_sample*m - saved*m*r; speed from a per-micro-step overhead and a recompute cost."""

    def __init__(self, fixed=20 * MiB, per_sample=2 * MiB, saved=0.3 * MiB, blocks=4, overhead=0.01,
                 per_sample_time=0.01, recompute_cost=0.25, amp_factor=1.0, small_batch_bonus=0.0):
        self.fixed, self.per_sample, self.saved, self.blocks = fixed, per_sample, saved, blocks
        self.overhead, self.per_sample_time, self.recompute_cost = overhead, per_sample_time, recompute_cost
        self.amp_factor, self.small_batch_bonus = amp_factor, small_batch_bonus
        self.calls: list[Strategy] = []

    def peak(self, s: Strategy) -> float:
        scale = self.amp_factor if s.precision != "fp32" else 1.0
        return self.fixed + s.micro_batch * (self.per_sample * scale - self.saved * scale * s.recompute_layers)

    def speed(self, s: Strategy) -> float:
        per_sample = self.per_sample_time * (1 + self.recompute_cost * s.recompute_layers / self.blocks)
        per_sample *= 1 + self.small_batch_bonus * s.micro_batch  # CPUs: caches favour small batches
        step = s.accumulation * (self.overhead + s.micro_batch * per_sample)
        return s.batch / step

    def __call__(self, budget: int, headroom: float = 0.05):
        def measure(s: Strategy) -> dict:
            self.calls.append(s)
            peak = int(self.peak(s))
            status = "fits" if peak <= budget * (1 - headroom) else "over_budget"
            return {**s.to_json(), "status": status, "peak_bytes": peak, "reserved_bytes": None,
                    "samples_per_sec": self.speed(s), "recompute_blocks": self.blocks, "error": None}
        return measure


def divisors(n: int, max_accumulation: int = 64) -> list[int]:
    return [m for m in range(n, 0, -1) if n % m == 0 and n // m <= max_accumulation]


def problem(budget: int, target: int = 64, **kwargs) -> Problem:
    kwargs.setdefault("micro_batches", divisors(target, kwargs.get("max_accumulation", 64)))
    return Problem(target_batch=target, budget_bytes=budget, headroom=0.05, **kwargs)


def grid_best(device: FakeDevice, prob: Problem) -> dict | None:
    measure = device(prob.budget_bytes, prob.headroom)
    results = [measure(Strategy("fp32", m, prob.target_batch // m, r))
               for m, r in itertools.product(prob.micro_batches, range(device.blocks + 1))]
    return choose(results)


def test_plain_fits_takes_one_probe():
    device = FakeDevice()
    outcome = Tuner(device(1024 * MiB), problem(1024 * MiB)).run()
    assert device.calls == [Strategy("fp32", 64, 1, 0)]
    assert outcome.chosen["micro_batch"] == 64


def test_accumulation_boundary_found_by_prediction_not_walking():
    device = FakeDevice(recompute_cost=10.0)  # recompute never pays off here
    budget = 80 * MiB  # limit 76 MiB: m <= 28 fits -> largest divisor 16
    outcome = Tuner(device(budget), problem(budget)).run()
    assert outcome.chosen["micro_batch"] == 16 and outcome.chosen["recompute_layers"] == 0
    # plain, the predicted edge (16), one smaller for throughput: no walk over 32, 8, 4, 2, 1
    plain_probes = [s for s in device.calls if s.recompute_layers == 0]
    assert len(plain_probes) <= 4, device.calls
    # recompute at m=32 was measured (the trade is measured), found slower and dropped
    assert any(s.micro_batch == 32 and s.recompute_layers for s in device.calls)


def test_miss_is_corrected():
    # the first (proportional) prediction is too optimistic because of the fixed memory; the search must
    # record the miss and still land on the true boundary
    device = FakeDevice(fixed=60 * MiB, recompute_cost=10.0)
    budget = 100 * MiB  # limit 95: m <= 17 -> 16
    outcome = Tuner(device(budget), problem(budget)).run()
    statuses = [(s.micro_batch, device.peak(s) <= 95 * MiB) for s in device.calls]
    assert outcome.chosen["micro_batch"] == 16
    assert any(not fits for m, fits in statuses[1:]), "expected at least one corrected miss"


def test_recompute_needed_when_accumulation_cannot_reach():
    device = FakeDevice(fixed=10 * MiB, per_sample=4 * MiB, saved=0.9 * MiB)
    prob = problem(60 * MiB, max_accumulation=4)  # smallest micro-batch 16: 74 MiB > 57 limit without recompute
    outcome = Tuner(device(60 * MiB), prob).run()
    chosen = outcome.chosen
    assert chosen is not None and chosen["micro_batch"] == 16
    assert chosen["recompute_layers"] == 2  # 10 + 16*(4 - 0.9*r) <= 57 -> r >= 1.99
    assert device.peak(Strategy("fp32", 16, 4, 1)) > 57 * MiB


def test_recompute_at_larger_micro_batch_kept_only_when_faster():
    # a device that idles at small micro-batches: big per-step overhead makes recompute at m=32 worth it
    device = FakeDevice(overhead=0.5, recompute_cost=0.2)
    budget = 80 * MiB
    prob = problem(budget)
    outcome = Tuner(device(budget), prob).run()
    probes = len(device.calls)
    best = grid_best(device, prob)
    assert outcome.chosen["recompute_layers"] > 0
    assert outcome.chosen["samples_per_sec"] >= 0.95 * best["samples_per_sec"]
    assert probes <= len(prob.micro_batches) * (device.blocks + 1) / 3


def test_smaller_micro_batch_probed_while_faster():
    device = FakeDevice(overhead=0.0, small_batch_bonus=0.05)  # CPU-like: smaller is faster
    budget = 80 * MiB
    prob = problem(budget)
    outcome = Tuner(device(budget), prob).run()
    calls = list(device.calls)
    best = grid_best(device, prob)
    assert outcome.chosen["micro_batch"] == best["micro_batch"] < 16
    assert not any(s.recompute_layers for s in calls), "recompute is pointless when smaller is faster"


def test_nothing_fits_reports_closest_and_suggestions():
    device = FakeDevice(fixed=200 * MiB)
    outcome = Tuner(device(100 * MiB), problem(100 * MiB)).run()
    assert outcome.chosen is None
    assert outcome.closest["micro_batch"] == 1 and outcome.closest["recompute_layers"] == 4
    needed = int(int(device.peak(Strategy("fp32", 1, 64, 4))) / 0.95) + 1
    assert outcome.suggestions[0] == f"a budget of at least {needed} bytes"


def test_amp_rung_runs_before_accumulation_and_unsupported_is_noted():
    device = FakeDevice(amp_factor=0.5)
    budget = 100 * MiB  # fp32 m=64: 148 MiB over; fp16 m=64: 84 MiB fits
    outcome = Tuner(device(budget), problem(budget, amp_precisions=["fp16", "bf16"],
                                            unsupported={"bf16": "no bf16 here"})).run()
    assert [s.precision for s in device.calls] == ["fp32", "fp16"]
    assert outcome.chosen["precision"] == "fp16" and outcome.chosen["accumulation"] == 1
    assert outcome.notes == ["bf16 skipped: no bf16 here"]


def test_no_recompute_option_is_respected():
    device = FakeDevice(fixed=10 * MiB, per_sample=4 * MiB, saved=0.9 * MiB)
    prob = problem(60 * MiB, max_accumulation=4, recompute=False)
    outcome = Tuner(device(60 * MiB), prob).run()
    assert outcome.chosen is None and not any(s.recompute_layers for s in device.calls)
    assert "recompute: set search.recompute to auto" in outcome.suggestions


def test_failed_probes_are_kept_and_treated_as_too_big():
    device = FakeDevice(recompute_cost=10.0)
    measure = device(80 * MiB)

    def flaky(s: Strategy) -> dict:
        result = measure(s)
        if s.micro_batch == 16:
            return {**result, "status": "oom", "peak_bytes": None, "error": "MemoryError: (ResourceExhausted)"}
        return result

    outcome = Tuner(flaky, problem(80 * MiB)).run()
    assert outcome.chosen["micro_batch"] == 8
    assert "oom" in [p["status"] for p in outcome.probes]


def test_choice_prefers_simpler_on_near_tie():
    results = [
        {**Strategy("fp32", 8, 8, 2).to_json(), "status": "fits", "samples_per_sec": 101.0},
        {**Strategy("fp32", 4, 16, 0).to_json(), "status": "fits", "samples_per_sec": 100.0},
        {**Strategy("fp32", 64, 1, 0).to_json(), "status": "over_budget", "samples_per_sec": 500.0},
    ]
    assert choose(results)["recompute_layers"] == 0


def test_memory_model_fits_affine_and_recompute_savings():
    model = MemoryModel([(32, 2, 0, 84), (16, 4, 0, 52), (16, 4, 4, 36)])
    assert model.predict(8, 8, 0) == pytest.approx(36)
    assert model.predict(32, 2, 2) == pytest.approx(84 - 32 * 0.25 * 2)
    assert MemoryModel([]).predict(8, 8, 0) is None


def test_memory_model_sets_the_unaccumulated_probe_apart():
    # k=1 frees gradients before the next forward: 10 below the accumulating line, and so is its recompute
    model = MemoryModel([(64, 1, 0, 138), (32, 2, 0, 84), (16, 4, 0, 52), (64, 1, 4, 74)])
    assert model.predict(8, 8, 0) == pytest.approx(36)
    assert model.predict(64, 1, 0) == pytest.approx(138)
    assert model.e == pytest.approx(0.25)
    assert model.predict(64, 1, 2) == pytest.approx(138 - 64 * 0.25 * 2)


def test_recompute_at_a_larger_micro_batch_is_skipped_when_predicted_slower():
    # accumulation cannot go below m=32 (max_accumulation 2) so recompute is needed at m=32; m=64 is no faster
    # per sample and recompute costs 25% per block there too: its speed is predicted, not probed
    device = FakeDevice(fixed=10 * MiB, per_sample=2 * MiB, saved=0.4 * MiB, overhead=0.0, recompute_cost=1.0)
    prob = problem(70 * MiB, max_accumulation=2)  # m=32: 74 MiB > 66.5 limit; r=1 fits
    outcome = Tuner(device(70 * MiB), prob).run()
    assert outcome.chosen["micro_batch"] == 32 and outcome.chosen["recompute_layers"] == 1
    assert not any(s.micro_batch == 64 and s.recompute_layers for s in device.calls)
    assert outcome.notes[-1].startswith("fp32 micro-batch 64 with recompute not probed: predicted")
