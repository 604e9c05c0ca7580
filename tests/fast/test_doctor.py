"""vramtune doctor over fake devices (no Paddle): every GPU check's pass and fail and the message a fail gives, the
gate before the first GPU probe, the saved result, and estimate's calibration from it."""
from __future__ import annotations

import dataclasses
import json
import math
from typing import ClassVar

import pytest
from conftest import CONFIGS, SPECS, mlp_spec
from fakes import BLOCK, FakeDevice, MiB, gpu

from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict
from vramtune.probing.runner import ChildOutcome, classify

SPEC = CONFIGS / "mlp-python-cpu.yaml"
OOM = ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 64.000000MB memory on GPU 0, "
       "256.000000MB memory has been allocated and available memory is only 0.000000 B.")


class FakeChecks:
    """A check's children over a FakeDevice: what a sane device reports (a GPU's AMP activations x amp_factor and
    o2_factor of fp32's, its reserve the fake's fragmentation); `faults[(check, part)]` changes a run's figures
    (a dict) or replaces the run (a CheckRun)."""

    STEP: ClassVar[dict] = {"base": 26 * MiB, "activations": 34 * MiB, "matmul_parameters": 1_638_656}

    def __init__(self, fake: FakeDevice):
        self.fake, self.faults, self.runs = fake, {}, []

    def run(self, check, device, part, env, timeout) -> CheckRun:
        self.runs.append((check.name, part, env))
        fault = self.faults.get((check.name, part))
        if isinstance(fault, CheckRun):
            return fault
        return CheckRun("measured", {**self.figures(check.name, part), **(fault or {})}, seconds=0.5)

    def step(self, part: str = "fp32") -> dict:
        scale = {"O1": self.fake.amp_factor, "O2": self.fake.o2_factor or self.fake.amp_factor}.get(part[-2:], 1.0)
        copies = 2 * self.STEP["matmul_parameters"] if part.endswith("O1") else 0
        activations = int(self.STEP["activations"] * scale + copies)
        peak = self.STEP["base"] + activations
        reserved = math.ceil(peak * (1 + self.fake.fragmentation) / BLOCK) * BLOCK if self.fake.kind == "gpu" else None
        return {**self.STEP, "activations": activations, "peak": peak, "reserved": reserved, "resets": True}

    def figures(self, name: str, part: str) -> dict:
        gpu_card, device = self.fake.kind == "gpu", self.fake.device()
        if name == "device":
            return {"paddle": device.paddle_version, "cuda_build": gpu_card, "cuda": "12.6", "cudnn": "9.5.1",
                    "capability": "8.0", "device": device.to_json()}
        if name == "counters":
            return {"size": 64 * MiB, "before": 0, "peak_allocated": 64 * MiB,
                    "peak_reserved": 64 * MiB if gpu_card else None, "fresh_peak": 0, "resets": True,
                    "after_free": 0, "after_reset": 0}
        if name == "budget":
            return {"limit_mb": 256, "allocated_mb": 256, "raised": OOM, "classified": "oom", "seconds": 0.01}
        if name == "amp" and part == "dtypes":
            half = {"fp16": "float16", "bf16": "bfloat16"}
            return {p: {"o1_matmul": half[p] if gpu_card else "float32", "o2_weight": half[p] if gpu_card else
                        "float32", "o2_masters": ["float32"] if gpu_card else [], "o2_master_count": 2 if gpu_card
                        else 0, "parameters": 2} for p in half if p not in device.amp_unsupported or not gpu_card}
        if name == "amp" and part == "scaler":
            return {"enabled": True, "finite_step_updated": True, "inf_step_updated": False, "scale_after": 512.0}
        if name == "amp" or name == "allocator":
            return {**self.step(part or "fp32"), **({"strategy": "auto_growth"} if name == "allocator" else {})}
        if name == "recompute":
            plain = self.step()
            recomputed = {**plain, "activations": 21 * MiB, "peak": plain["base"] + 21 * MiB}
            return {"plain": plain, "recomputed": recomputed, **({"library": "PaddleFormers"} if part == "native"
                                                                  else {})}
        if name == "ranks":
            return {"ranks": [{"rank": r, "world_size": 2, **self.step()} for r in range(2)]}
        raise KeyError(name)


@pytest.fixture
def doctor_cli(fake_cli, monkeypatch):
    """doctor_cli(device) -> (invoke, backend, checks): the CLI over a fake device that runs doctor checks (with
    PaddleFormers' own recompute checked, whatever is installed here)."""
    monkeypatch.setattr("vramtune.doctor.recompute.library", lambda: "paddleformers")

    def make(device):
        cli, backend = fake_cli(device)
        backend.checks = FakeChecks(device)
        return cli, backend, backend.checks
    return make


def a100():
    return gpu("fake A100 80GB", 80, noise=0.0)


def test_doctor_on_a_cpu_runs_what_applies_and_skips_the_rest_with_the_reason(doctor_cli):
    cli, _, checks = doctor_cli(FakeDevice())
    code, out, err = cli("doctor")
    assert (code, out) == (0, "")
    lines = err.splitlines()
    assert lines[1].startswith("pass  device     fake cpu, 8 cores, 64.0 GiB; Paddle 0.0-fake (CPU build)")
    assert lines[2].startswith("pass  counters   a 64.0 MiB tensor moved the allocated peak by 64.0 MiB; after "
                               "freeing it and a reset the peak is 0 B")
    assert lines[3] == ("skip  budget     FLAGS_gpu_memory_limit_mb caps a GPU's allocator; on CPU the budget is "
                        "judged from the measured peak")
    assert lines[4].startswith("pass  amp        auto_cast changes nothing here: under fp16 and bf16 a matmul's "
                               "output stays float32")
    assert lines[5].startswith("pass  recompute  vramtune's wrapper: activations 21.0 MiB instead of 34.0 MiB (38% "
                               "saved); PaddleFormers' own (a small Llama): activations 21.0 MiB instead of 34.0 MiB")
    assert lines[6] == "skip  ranks      needs 2+ GPUs (this machine: no GPU)"
    assert lines[7].startswith("skip  allocator  the CPU allocator keeps no reserve")
    assert lines[8].startswith("doctor: 4 passed, 0 failed, 3 skipped in ")
    assert [(name, part) for name, part, _ in checks.runs] == [
        ("device", ""), ("counters", ""), ("amp", "dtypes"), ("recompute", "wrapper"), ("recompute", "native")]


def test_doctor_on_a_gpu_passes_every_check_and_saves_its_json(doctor_cli, private_cache):
    cli, _, checks = doctor_cli(a100())
    code, out, err = cli("doctor", "--json")
    result = json.loads(out)
    assert code == 0, err
    assert [(c["name"], c["status"]) for c in result["checks"]] == [
        ("device", "pass"), ("counters", "pass"), ("budget", "pass"), ("amp", "pass"), ("recompute", "pass"),
        ("ranks", "pass"), ("allocator", "pass")]
    amp = result["checks"][3]
    assert list(amp["figures"]) == ["dtypes", "scaler", "fp32", "fp16-O1", "fp16-O2", "bf16-O1", "bf16-O2"]
    assert "fp16-O1 peak 0.80 of fp32's, activations x0.55" in amp["figure"]
    assert "bf16-O2 peak 0.72 of fp32's, activations x0.50" in amp["figure"]
    assert "GradScaler stepped on a finite step, skipped an inf step (scale 512.0)" in amp["figure"]
    assert result["checks"][6]["figure"].endswith("reserved 66.0 MiB (+10.0%)")  # 8% more, in 2 MiB blocks
    assert ("budget", "", {"FLAGS_gpu_memory_limit_mb": "256", "FLAGS_gpu_allocator_retry_time": "0"}) in checks.runs
    (path,) = private_cache.glob("doctor/*.json")
    assert path.name == "gpu-fake-A100-80GB-paddle-0.0-fake.json"
    assert json.loads(path.read_text())["checks"] == result["checks"]


def test_doctor_on_a_card_without_bf16_checks_fp16_only(doctor_cli):
    cli, _, _ = doctor_cli(gpu("fake V100", 16, bf16=False))
    code, out, _ = cli("doctor", "--json")
    amp = json.loads(out)["checks"][3]
    assert code == 0 and list(amp["figures"]) == ["dtypes", "scaler", "fp32", "fp16-O1", "fp16-O2"]


GPU_FAILS = [
    ("counters", "", {"peak_allocated": 32 * MiB}, "a 64.0 MiB tensor moved the allocated peak by 32.0 MiB",
     "the allocated peak misses allocations: every probe's peak is too low"),
    ("counters", "", {"peak_reserved": 16 * MiB}, "reserved peak 16.0 MiB",
     "the reserved peak is below what was allocated"),
    ("counters", "", {"after_reset": 64 * MiB}, "after freeing it and a reset the peak is 64.0 MiB",
     "the reset does not reset"),
    ("counters", "", {"resets": False, "fresh_peak": 300 * MiB}, "a fresh process peaks at 300.0 MiB",
     "without a reset a probe's peak counts from its process start"),
    ("budget", "", {"raised": None, "classified": None, "allocated_mb": 512},
     "allocated 512 MiB under a 256 MiB limit without an error", "the budget is not enforced"),
    ("budget", "", {"raised": "RuntimeError: CUDA error 2", "classified": "crashed"}, "classified crashed",
     "vramtune does not recognise this error as out-of-memory"),
    ("budget", "", {"seconds": 10.02}, "classified oom, raised after 10.0s",
     "the allocator retried before raising (Paddle's RetryAllocator"),
    ("amp", "dtypes", {"fp16": {"o1_matmul": "float32", "o2_weight": "float16", "o2_masters": ["float32"],
                                "o2_master_count": 2, "parameters": 2}},
     "fp16 O1 matmul float32", "auto_cast O1 does not cast a matmul to float16"),
    ("amp", "dtypes", {"bf16": {"o1_matmul": "bfloat16", "o2_weight": "bfloat16", "o2_masters": [],
                                "o2_master_count": 0, "parameters": 2}},
     "bf16 O1 matmul bfloat16, O2 weights bfloat16 with 0 master weights -",
     "O2's decorate does not keep bfloat16 weights with float32 master weights"),
    ("amp", "scaler", {"inf_step_updated": True}, "updated an inf step",
     "GradScaler does not step finite gradients and skip inf ones"),
    ("amp", "fp16-O1", {"peak": 70 * MiB}, "fp16-O1 peak 1.17 of fp32's", "fp16-O1 peaks no lower than fp32"),
    ("recompute", "wrapper", {"recomputed": {"activations": 40 * MiB}}, "wrapper: activations 40.0 MiB instead of "
     "34.0 MiB (-18% saved)", "recompute (vramtune's wrapper) saves no memory here"),
    ("recompute", "native", {"recomputed": {"activations": 34 * MiB}}, "PaddleFormers' own (a small Llama): "
     "activations 34.0 MiB instead of 34.0 MiB (0% saved)", "recompute (PaddleFormers' own (a small Llama)) saves"),
    ("ranks", "", {"ranks": [{"rank": 0, "world_size": 1, "peak": 60 * MiB}]}, "rank 0 peak 60.0 MiB",
     "not every rank reported from a world of 2"),
    ("allocator", "", {"strategy": "naive_best_fit"}, "FLAGS_allocator_strategy=naive_best_fit",
     "with naive_best_fit the pool is reserved up front"),
]


@pytest.mark.parametrize("name, part, figures, figure, meaning", GPU_FAILS,
                         ids=[f"{n}-{p or 'main'}-{i}" for i, (n, p, *_) in enumerate(GPU_FAILS)])
def test_each_gpu_check_fails_with_its_figure_and_what_it_means(doctor_cli, name, part, figures, figure, meaning):
    cli, _, checks = doctor_cli(a100())
    checks.faults[(name, part)] = figures
    code, out, err = cli("doctor", "--json")
    (failed,) = [c for c in json.loads(out)["checks"] if c["status"] == "fail"]
    assert code == 1 and failed["name"] == name
    assert figure in failed["figure"] and failed["meaning"].startswith(meaning)
    assert f"      means: {failed['meaning']}" in err and "doctor: 6 passed, 1 failed, 0 skipped" in err


def test_a_budget_child_killed_by_its_oom_passes_and_a_crashed_one_fails(doctor_cli):
    """A child that dies of the out-of-memory (no result written) is classified from its output, as a probe is."""
    cli, _, checks = doctor_cli(a100())
    died = classify(ChildOutcome(1, False, f"Traceback ...\n{OOM}", 2.0), None, 300)
    checks.faults[("budget", "")] = CheckRun(died["status"], error=died["error"])
    code, out, _ = cli("doctor", "--json")
    budget = json.loads(out)["checks"][2]
    assert code == 0 and budget["status"] == "pass" and budget["figure"].endswith("classified oom")
    crashed = classify(ChildOutcome(-11, False, "", 2.0), None, 300)
    checks.faults[("budget", "")] = CheckRun(crashed["status"], error=crashed["error"])
    code, out, _ = cli("doctor", "--json")
    budget = json.loads(out)["checks"][2]
    assert code == 1 and budget["figure"] == "the child ended crashed: killed by SIGSEGV"
    assert budget["meaning"].startswith("a probe over the budget would be reported as a crash")


def test_no_gpu_in_this_paddle_fails_the_device_check_and_skips_the_rest(doctor_cli):
    cli, _, checks = doctor_cli(a100())
    checks.faults[("device", "")] = {"unavailable": "this Paddle build sees no GPU (paddle 0.0-fake, compiled with "
                                                    "CUDA: False)", "device": None}
    code, out, err = cli("doctor", "--device", "gpu", "--json")
    result = json.loads(out)
    assert code == 1 and result["device"] is None
    assert [c["status"] for c in result["checks"]] == ["fail"] + ["skip"] * 6
    assert result["checks"][1]["meaning"] == "no device to check (see the device check)"
    assert "saved to" not in err  # no device: nothing to save it under


def gpu_spec(write_spec):
    return write_spec(mlp_spec(device="gpu", budget="auto", **{"train.target_batch": 64}), "gpu.yaml")


def test_probe_on_a_gpu_runs_the_gating_checks_once_per_device_and_paddle_version(doctor_cli, write_spec):
    cli, _, checks = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    spec = gpu_spec(write_spec)
    code, _, err = cli("probe", spec, "--fresh")
    assert code == 0, err
    assert [name for name, _, _ in checks.runs] == ["device", "counters", "budget", "allocator"]
    assert ("doctor: first measurement on fake A100 80GB with Paddle 0.0-fake: checking device, counters, budget, "
            "allocator (once per device and Paddle version)") in err
    code, _, err = cli("measure", spec, "--micro-batch", "8")
    assert code == 0 and len(checks.runs) == 4 and "doctor:" not in err  # saved: not checked again


def test_a_failed_gating_check_stops_probe_before_its_first_probe_with_one_message_exit_2(doctor_cli, write_spec,
                                                                                       private_cache):
    cli, backend, checks = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    checks.faults[("budget", "")] = {"raised": None, "classified": None, "allocated_mb": 512}
    spec = gpu_spec(write_spec)
    code, out, err = cli("probe", spec)
    assert (code, out, backend.jobs) == (2, "", [])  # nothing measured
    (message,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert message.startswith("error: vramtune doctor: the budget check failed on fake A100 80GB (Paddle 0.0-fake): "
                              "allocated 512 MiB under a 256 MiB limit without an error. This means: the budget is "
                              "not enforced")
    assert message.endswith("run `vramtune doctor --device gpu:0` (saved in "
                            f"{private_cache}/doctor/gpu-fake-A100-80GB-paddle-0.0-fake.json)")
    runs = len(checks.runs)
    assert cli("measure", spec, "--micro-batch", "8")[0] == 2 and len(checks.runs) == runs  # the saved fail stops it
    del checks.faults[("budget", "")]
    assert cli("doctor")[0] == 0  # fixed and checked again: probing goes on
    code, _, err = cli("probe", spec)
    assert code == 0 and backend.jobs, err


def test_a_cpu_probe_is_never_gated(doctor_cli):
    cli, backend, checks = doctor_cli(FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6))
    assert cli("probe", SPEC)[0] == 0 and backend.jobs and checks.runs == []


def test_doctor_result_round_trips_and_other_devices_keep_their_own(doctor_cli, private_cache):
    for name in ("fake A100 80GB", "fake L4"):
        cli, _, _ = doctor_cli(dataclasses.replace(a100(), name=name))
        assert cli("doctor")[0] == 0
    assert sorted(p.name for p in private_cache.glob("doctor/*.json")) == [
        "gpu-fake-A100-80GB-paddle-0.0-fake.json", "gpu-fake-L4-paddle-0.0-fake.json"]


def test_estimate_takes_amp_ratios_and_the_reserve_from_a_saved_doctor_result_of_the_card(doctor_cli):
    card = gpu("fake A100 80GB", 80, amp_factor=0.6, o2_factor=0.45, fragmentation=0.1, noise=0.0)
    cli, _, _ = doctor_cli(card)
    code, out, err = cli("estimate", SPEC, "--card", "80GiB", "--json")
    assert code == 0, err
    assert json.loads(out)["factors"] == {"o1_activations": 0.55, "o2_activations": 0.5, "fragmentation": 0.08,
                                          "source": "stated"}
    assert "note: measured on CPU: the counted state (exact), fp32 activations (probes); assumed (stated): AMP O1 " \
           "activations x0.55 of fp32's, O2 x0.5, the GPU allocator's reserve +8%" in err
    assert cli("doctor")[0] == 0
    code, out, err = cli("estimate", SPEC, "--card", "80GiB", "--json")
    factors = json.loads(out)["factors"]
    assert code == 0, err
    assert factors["o1_activations"] == pytest.approx(0.6) and factors["o2_activations"] == pytest.approx(0.45)
    assert factors["fragmentation"] == pytest.approx(0.1)  # 60 MiB x 1.1 is whole 2 MiB blocks
    source = ("AMP O1 activations, AMP O2 activations, the allocator's reserve measured by vramtune doctor on fake "
              "A100 80GB, Paddle 0.0-fake, 20")
    assert factors["source"].startswith(source) and f"assumed ({source}" in err
    assert "O2 x0.45, the GPU allocator's reserve +10%" in err
    code, out, _ = cli("estimate", SPEC, "--card", "24GiB", "--json")
    assert json.loads(out)["factors"]["source"] == "stated"  # another card: nothing measured for it


def test_estimate_uses_only_the_figures_of_passed_doctor_checks(doctor_cli):
    cli, _, checks = doctor_cli(gpu("fake A100 80GB", 80, fragmentation=0.1, noise=0.0))
    checks.faults[("amp", "fp16-O1")] = {"peak": 70 * MiB}  # O1 saves nothing: the AMP check fails
    assert cli("doctor")[0] == 1
    _, out, _ = cli("estimate", SPEC, "--card", "80GiB", "--json")
    factors = json.loads(out)["factors"]
    assert (factors["o1_activations"], factors["o2_activations"]) == (0.55, 0.5)
    assert factors["fragmentation"] == pytest.approx(0.1)
    assert factors["source"].startswith("the allocator's reserve measured by vramtune doctor on fake A100 80GB")
    assert factors["source"].endswith("; stated: AMP O1 activations, AMP O2 activations")


def test_check_on_a_gpu_is_gated_too_and_apply_from_saved_results_is_not(doctor_cli, write_spec, tmp_path):
    cli, backend, checks = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    spec = gpu_spec(write_spec)
    tuned = tmp_path / "gpu.tuned.yaml"
    assert cli("apply", spec, "-o", tuned)[0] == 0  # probed: the gate passed first
    checks.faults[("counters", "")] = {"peak_allocated": 32 * MiB}
    assert cli("doctor")[0] == 1  # the counters now fail, and the failure is saved
    probes = len(backend.jobs)
    code, _, err = cli("apply", spec, "-o", tmp_path / "again.yaml")
    assert code == 0 and len(backend.jobs) == probes, err  # from saved results: nothing measured, nothing gated
    code, out, err = cli("check", tuned, "--json")
    failure = json.loads(out)  # --json: the failure on stdout too (docs/cli.md)
    assert (code, failure["exit_code"], len(backend.jobs)) == (2, 2, probes)
    assert failure["error"].startswith("vramtune doctor: the counters check failed on fake A100 80GB")
    assert err.endswith(f"error: {failure['error']}\n")


def test_a_bad_device_is_exit_2_before_any_check_runs(doctor_cli):
    cli, _, checks = doctor_cli(FakeDevice())
    assert cli("doctor", "--device", "bogus") == (2, "", "error: --device 'bogus': must be auto, cpu, gpu or gpu:N\n")
    assert checks.runs == []


def test_a_config_json_estimate_takes_the_saved_doctor_factors_too(doctor_cli):
    config = SPECS / "configs" / "qwen3-8b.json"
    cli, _, _ = doctor_cli(gpu("fake A100 80GB", 80, amp_factor=0.6, o2_factor=0.45, fragmentation=0.1, noise=0.0))
    assert json.loads(cli("estimate", config, "--card", "80GiB", "--json")[1])["factors"]["source"] == "stated"
    assert cli("doctor")[0] == 0
    code, out, err = cli("estimate", config, "--card", "80GiB", "--budget", "60GiB", "--json")
    factors = json.loads(out)["factors"]
    assert code == 0, err
    assert (factors["o1_activations"], factors["o2_activations"]) == (pytest.approx(0.6), pytest.approx(0.45))
    assert factors["source"].startswith("AMP O1 activations, AMP O2 activations, the allocator's reserve measured by "
                                        "vramtune doctor on fake A100 80GB")
    assert "predicted per-rank peaks within 57.0 GiB" in err  # the budget, less the headroom; the card's factors


def test_the_models_own_recompute_is_checked_on_a_paddle_2_6_cpu_too(monkeypatch):
    """Paddle 2.6 cannot keep the CPU's RNG state in recompute: the check runs the model's own recompute without it,
    as probes do, instead of skipping it."""
    from vramtune.core.records import Device
    from vramtune.doctor.recompute import CHECK

    monkeypatch.setattr("vramtune.doctor.recompute.library", lambda: "paddlenlp")
    assert CHECK.parts(Device("cpu", 0, "cpu", 16 << 30, "2.6.2")) == ("wrapper", "native")
    monkeypatch.setattr("vramtune.doctor.recompute.library", lambda: None)
    assert CHECK.parts(Device("cpu", 0, "cpu", 16 << 30, "2.6.2")) == ("wrapper",)


class Offload(Check):
    """A new mechanism's assumption (its check written beside it, here in the test file): offloaded bytes leave
    the device."""

    name, title = "offload", "offloaded bytes leave the device"

    def judge(self, runs, device) -> Verdict:
        moved = runs[""].figures["moved"]
        return Verdict(PASS if moved else FAIL, f"{moved} bytes moved", "" if moved else "offload saves nothing")




def test_an_allocator_pooling_up_front_stops_a_gpu_probe_before_any_job(doctor_cli, write_spec):
    """naive_best_fit reserves a pool up front: every reserved peak would be the pool's size (issue 37, item 10)."""
    cli, backend, checks = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    checks.faults[("allocator", "")] = {"strategy": "naive_best_fit"}
    code, out, err = cli("probe", gpu_spec(write_spec))
    assert (code, out, backend.jobs) == (2, "", [])
    assert "error: vramtune doctor: the allocator check failed on fake A100 80GB" in err
    assert "FLAGS_allocator_strategy=naive_best_fit" in err


def test_the_ranks_are_checked_before_the_first_multi_rank_probe_only(doctor_cli, write_spec):
    cli, backend, checks = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    checks.faults[("ranks", "")] = CheckRun("crashed", {}, "NCCL error: unhandled system error")
    spec = gpu_spec(write_spec)
    code, _, err = cli("measure", spec, "--micro-batch", "8")
    assert code == 0 and "ranks" not in [name for name, _, _ in checks.runs], err  # one rank: not needed
    code, out, err = cli("measure", spec, "--micro-batch", "8", "--devices", "2")
    assert (code, out) == (2, "") and len(backend.jobs) == 1, err  # the single-rank probe's job only
    assert "error: vramtune doctor: the ranks check failed on fake A100 80GB" in err
    assert "NCCL error: unhandled system error" in err


def test_the_allocator_is_checked_again_when_its_environment_changes(doctor_cli, write_spec, monkeypatch):
    cli, _, checks = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    spec = gpu_spec(write_spec)
    assert cli("measure", spec, "--micro-batch", "8")[0] == 0
    assert [name for name, _, _ in checks.runs] == ["device", "counters", "budget", "allocator"]
    monkeypatch.setenv("FLAGS_allocator_strategy", "naive_best_fit")  # exported after the saved pass
    checks.faults[("allocator", "")] = {"strategy": "naive_best_fit", "env": {"FLAGS_allocator_strategy":
                                                                              "naive_best_fit"}}
    code, _, err = cli("measure", spec, "--micro-batch", "8")
    assert code == 2 and [name for name, _, _ in checks.runs][4:] == ["device", "allocator"], err
    assert "checking allocator (FLAGS_allocator_strategy=naive_best_fit: not what it was checked under)" in err


def test_a_small_dev_shm_stops_a_multi_rank_gpu_probe_with_the_remedies(doctor_cli, write_spec, monkeypatch):
    import os

    cli, backend, _ = doctor_cli(gpu("fake A100 80GB", 80, per_sample=MiB / 20, noise=0.0))
    small = os.statvfs_result((4096, 4096, 16384, 16384, 16384, 0, 0, 0, 0, 255))  # 64 MiB, Docker's default
    monkeypatch.setattr("vramtune.doctor.ranks.os.statvfs", lambda path: small)
    monkeypatch.delenv("NCCL_SHM_DISABLE", raising=False)
    code, _, err = cli("measure", gpu_spec(write_spec), "--micro-batch", "8", "--devices", "2")
    assert code == 2 and backend.jobs == [], err
    assert ("/dev/shm holds 64.0 MiB: NCCL's shared-memory transport between the ranks needs more (at least 512.0 MiB); "
            "run the container with --shm-size=1g or more, or set NCCL_SHM_DISABLE=1") in err
    monkeypatch.setenv("NCCL_SHM_DISABLE", "1")
    assert cli("measure", gpu_spec(write_spec), "--micro-batch", "8", "--devices", "2")[0] == 0
