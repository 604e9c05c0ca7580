"""Every command's behaviour over fake devices (no Paddle): output, --json shapes, exit codes, resume,
interrupts, files, internal errors."""
from __future__ import annotations

import json
import os
import stat

import pytest
import yaml
from conftest import CONFIGS, mlp_spec
from fakes import FakeDevice, MiB, file_size_limit

from vramtune.core.strategy import Strategy
from vramtune.core.units import format_bytes

SPEC = CONFIGS / "mlp-python-cpu.yaml"  # target 2048, budget 40 MiB (limit 38 MiB), 6 blocks


def small():
    """Fits from micro-batch 256 down: 20 MiB fixed + 0.05 MiB per sample."""
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6)


def test_probe_chooses_and_prints_the_choice_on_stdout_too(fake_cli):
    cli, _ = fake_cli(small())
    code, out, err = cli("probe", SPEC)
    assert code == 0, err
    assert out.startswith("chosen: fp32, micro-batch ") and out.count("\n") == 1
    assert out.strip() in err  # the same line closes the human report
    assert "note: fp16 skipped" not in err  # the fake cpu runs everything it is asked


def test_only_a_runs_first_measured_probe_pushes_one_sample_through_first(fake_cli):
    """The shape check (one sample through the model, shape errors as a clear build error) is paid once per run:
    once a probe has measured, the data fits the model."""
    cli, backend = fake_cli(small())
    code, _, err = cli("probe", SPEC)
    assert code == 0 and len(backend.jobs) > 2, err
    assert [job.check_sample for job in backend.jobs] == [True] + [False] * (len(backend.jobs) - 1)


def test_probe_json_shape(fake_cli):
    cli, _ = fake_cli(small())
    code, out, _ = cli("probe", SPEC, "--json")
    report = json.loads(out)
    assert code == 0
    assert set(report) == {"spec", "spec_path", "device", "paddle_version", "vramtune", "budget_bytes", "headroom",
                           "limit_bytes", "target_batch", "chosen", "probes", "notes", "closest", "suggestions",
                           "reused", "interrupted", "seconds"}
    chosen = report["chosen"]
    assert {"precision", "micro_batch", "accumulation", "recomputed_blocks", "total_blocks", "block_path",
            "peak_bytes", "reserved_bytes", "samples_per_sec", "status"} <= set(chosen)
    assert chosen["micro_batch"] * chosen["accumulation"] == 2048
    assert chosen["peak_bytes"] <= report["limit_bytes"] == int(40 * MiB * 0.95)


def test_nothing_fits_exit_1_and_the_suggested_budget_makes_it_fit(fake_cli):
    device = FakeDevice(fixed=60 * MiB, per_sample=MiB / 20, saved=0, blocks=6)
    cli, _ = fake_cli(device)
    code, out, err = cli("probe", SPEC, "--json")
    report = json.loads(out)
    assert code == 1 and report["chosen"] is None and "nothing fits" in err
    tip = report["suggestions"][0]
    assert tip == ("a budget of 64.9 MiB (at least 67991875 bytes), under which the closest measured, fp16-o2 m=32 "
                   "k=64 r=0, fits")
    assert f"  would fit with: {tip}\n" in err
    needed = 67991875
    for budget in (str(needed), "64.9MiB"):  # in bytes, and as it reads
        code, out, _ = cli("probe", SPEC, "--json", "--budget", budget)
        assert code == 0, "the suggested budget must make the closest miss fit"
    code, _, _ = cli("probe", SPEC, "--json", "--budget", str(needed - 2))
    assert code == 1, "and a smaller one must not: the suggestion is the least that fits"


def test_a_probe_just_over_the_limit_never_reads_100_percent(fake_cli):
    """38 MiB + 32 KiB against the 38 MiB limit is 100.08%: rounded it read "100%" (the table, the closest line) and
    its bar stopped at the limit's `|`, as a probe that fits would."""
    cli, _ = fake_cli(FakeDevice(fixed=38 * MiB, per_sample=MiB / 1000, saved=0, blocks=6))
    code, _, err = cli("probe", SPEC)
    assert code == 1
    assert ("closest: fp16-o2 m=32 k=64 r=0 peaked at 38.0 MiB, 32.8 KiB over (101% of the limit)\n") in err
    assert "│  3 │ accumulation │ fp16-o2 m=32 k=64 r=0/6  │ over_budget │ 38.0 MiB │     101% │" in err
    assert f"  fp16-o2 r=0      m=32    {'█' * 46}|█ 38.0 MiB\n" in err
    assert "100%" not in err


def test_a_headroom_of_2_5_percent_reads_so(fake_cli, write_spec):
    cli, _ = fake_cli(small())
    code, out, _ = cli("probe", write_spec(mlp_spec(headroom=0.025)))
    assert code == 0 and "; budget 40.0 MiB less 2.5% headroom)" in out  # was "less 2% headroom"


def test_second_run_reuses_every_probe(fake_cli):
    cli, backend = fake_cli(small())
    _, first, _ = cli("probe", SPEC, "--json")
    probes = len(backend.jobs)
    code, second, err = cli("probe", SPEC, "--json")
    assert code == 0 and len(backend.jobs) == probes  # nothing measured again
    assert json.loads(second)["reused"] == len(json.loads(first)["probes"])
    assert f"reused {len(json.loads(first)['probes'])} saved probe(s)" in err
    cli("probe", SPEC, "--fresh")
    assert len(backend.jobs) == 2 * probes


def interrupt_after(device, probes: int):
    """Make the device raise KeyboardInterrupt (Ctrl-C) once `probes` probes have been measured; returns the
    original measuring function, to restore."""
    original = device.result

    def interrupted(s, budget):
        if len(device.calls) == probes:
            raise KeyboardInterrupt
        return original(s, budget)
    device.result = interrupted
    return original


def test_one_probe_is_said_in_the_singular(fake_cli):
    device = small()
    cli, _ = fake_cli(device)
    interrupt_after(device, 1)
    code, _, err = cli("probe", SPEC)
    assert code == 130 and err.splitlines()[-1].startswith("1 probe in "), err  # was '1 probes in'


def test_interrupt_exits_130_with_the_partial_report_and_saved_probes(fake_cli):
    device = small()
    cli, _ = fake_cli(device)
    original = interrupt_after(device, 2)
    code, out, err = cli("probe", SPEC, "--json")
    assert code == 130 and json.loads(out)["interrupted"] is True
    assert len(json.loads(out)["probes"]) == 2
    assert "\ninterrupted after 2 probe(s): finished probes are saved; run again to resume\n2 probes in " in err
    device.result = original
    code, out, _ = cli("probe", SPEC, "--json")
    assert code == 0 and json.loads(out)["reused"] == 2


def test_measure_exit_codes_fits_0_over_budget_1(fake_cli):
    cli, _ = fake_cli(small())
    code, out, err = cli("measure", SPEC, "-m", 256, "--json")
    assert code == 0 and json.loads(out)["status"] == "fits"
    assert err.startswith("fp32 m=256 k=8 r=0: fits\n")
    code, out, _ = cli("measure", SPEC, "-m", 1024, "--json")
    assert code == 1 and json.loads(out)["status"] == "over_budget"


@pytest.mark.parametrize("args, message", [
    (("--micro-batch", 3), "--micro-batch: 3 does not divide train.target_batch 2048; give --accumulation explicitly"),
    (("--micro-batch", 0), "--micro-batch: must be positive, got 0"),
    (("--micro-batch", 8, "--recompute", -1), "--recompute: must be 0 or more, got -1"),
    (("--micro-batch", 8, "--accumulation", 0), "--accumulation: must be positive, got 0"),
    ((), "--micro-batch: is required"),
])
def test_measure_bad_flags(fake_cli, args, message):
    cli, backend = fake_cli(small())
    code, out, err = cli("measure", SPEC, *args)
    assert (code, out, err) == (2, "", f"error: {SPEC}: {message}\n")
    assert backend.jobs == []


def test_measure_precision_is_a_typed_choice(fake_cli):
    cli, _ = fake_cli(small())
    code, _, err = cli("measure", SPEC, "-m", 8, "--precision", "fp64")
    assert code == 2 and "'fp64' is not one of" in " ".join(err.replace("│", " ").split())


def test_apply_writes_an_ordinary_file_and_reapplying_keeps_one_header(fake_cli, tmp_path):
    cli, _ = fake_cli(small())
    spec = tmp_path / "mlp.yaml"
    spec.write_text(SPEC.read_text())
    old = os.umask(0o022)
    try:
        code, _, err = cli("apply", spec)
    finally:
        os.umask(old)
    out = tmp_path / "mlp.tuned.yaml"
    assert code == 0 and err.endswith(f"wrote {out}\n")
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    code, _, err = cli("apply", out, "--force")  # re-apply onto the tuned file itself
    assert code == 0, err
    text = out.read_text()
    assert text.count("# tuned by vramtune") == 1 and text.count("\ntuned:") == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_apply_to_stdout_and_json(fake_cli, tmp_path):
    cli, _ = fake_cli(small())
    code, out, _ = cli("apply", SPEC, "-o", "-", "--format", "paddlenlp")
    arguments = json.loads(out)
    assert code == 0 and arguments["per_device_train_batch_size"] * arguments["gradient_accumulation_steps"] == 2048
    target = tmp_path / "t.yaml"
    code, out, _ = cli("apply", SPEC, "-o", target, "--json")
    payload = json.loads(out)
    assert code == 0 and payload["output"] == str(target) and payload["format"] == "yaml"
    assert yaml.safe_load(target.read_text())["tuned"]["micro_batch"] == payload["chosen"]["micro_batch"]


def test_apply_force_replaces_and_a_failed_write_keeps_the_old_file(fake_cli, tmp_path):
    cli, _ = fake_cli(small())
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "t.yaml"
    target.write_text("old\n")
    code, _, err = cli("apply", SPEC, "-o", target)
    assert (code, target.read_text()) == (2, "old\n") and "exists; pass --force" in err
    code, _, _ = cli("apply", SPEC, "-o", target, "--force")
    assert code == 0 and "tuned:" in target.read_text()
    before = target.read_bytes()
    with file_size_limit(100):  # the new text is longer: its write fails half-way (also as root)
        code, _, err = cli("apply", SPEC, "-o", target, "--force")
    assert code == 2 and err.splitlines()[-1] == f"error: cannot write {target}: File too large"
    assert target.read_bytes() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.yaml"]  # no temp file left behind


def tuned_file(cli, tmp_path):
    target = tmp_path / "mlp.tuned.yaml"
    code, _, err = cli("apply", SPEC, "-o", target)
    assert code == 0, err
    return target


def edited(path, **tuned):
    data = yaml.safe_load(path.read_text())
    data["tuned"].update(tuned)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_check_tolerance_in_both_directions(fake_cli, tmp_path):
    cli, _ = fake_cli(small())
    target = tuned_file(cli, tmp_path)
    peak = yaml.safe_load(target.read_text())["tuned"]["peak_bytes"]
    code, out, _ = cli("check", edited(target, peak_bytes=int(peak / 1.04)), "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"]) == (0, "pass")  # grew 4%: within 5%
    assert verdict["notes"] == [f"peak {format_bytes(peak)} against {format_bytes(int(peak / 1.04))} at tuning "
                                f"(+4.0%; tolerance 5%), limit 38.0 MiB"]
    code, out, _ = cli("check", edited(target, peak_bytes=int(peak / 1.06)), "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["reasons"][0].startswith(f"peak grew from {int(peak / 1.06)} bytes")
    code, _, _ = cli("check", target, "--tolerance", "0.07")
    assert code == 0
    code, out, _ = cli("check", edited(target, peak_bytes=int(peak / 1.0504)), "--tolerance", "0.05", "--json")
    assert json.loads(out)["reasons"] == [f"peak grew from {int(peak / 1.0504)} bytes ({format_bytes(peak / 1.0504)}) "
                                          f"at tuning to {peak} bytes ({format_bytes(peak)}), +5.1% > tolerance 5%"]
    code, out, _ = cli("check", edited(target, peak_bytes=int(peak / 1.024)), "--tolerance", "0.025", "--json")
    assert json.loads(out)["notes"][0].endswith("(+2.4%; tolerance 2.5%), limit 38.0 MiB")  # was "tolerance 2%"


def test_check_fails_when_the_tuned_config_no_longer_trains(fake_cli, tmp_path):
    device = small()
    cli, _ = fake_cli(device)
    target = tuned_file(cli, tmp_path)
    device.result = lambda s, budget: __import__("vramtune.core.records", fromlist=["ProbeResult"]).ProbeResult(
        "crashed", s, error="killed by SIGSEGV")
    code, out, err = cli("check", target, "--json")
    assert code == 1 and json.loads(out)["reasons"] == ["the tuned configuration no longer trains: crashed: "
                                                        "killed by SIGSEGV"]
    assert err.endswith("check: fail\n")


def test_check_on_a_gpu_judges_the_tuned_budget_not_the_bigger_card(fake_cli, tmp_path, write_spec):
    card = FakeDevice(kind="gpu", name="fake A100 80GB", card_bytes=80 * 2**30, fixed=10 * 2**30,
                      per_sample=2**30)
    cli, _ = fake_cli(card)
    spec = write_spec(mlp_spec(device="gpu", budget="auto", **{"train.target_batch": 8}), "gpu.yaml")
    target = tmp_path / "gpu.tuned.yaml"
    assert cli("apply", spec, "-o", target)[0] == 0
    edited(target, budget_bytes=16 * 2**30)  # tuned for a 16 GiB card; this runner has 80 GiB
    code, out, _ = cli("check", target, "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["limit_bytes"] == int(16 * 2**30 * 0.95)


def test_check_without_the_tuned_device_smokes_or_fails_under_strict(fake_cli, tmp_path, write_spec):
    cli, _ = fake_cli(small(), missing={"gpu"})
    spec = mlp_spec(device="gpu", budget="auto")
    spec["tuned"] = {"precision": "fp16", "micro_batch": 512, "accumulation": 4, "recomputed_blocks": 2,
                     "total_blocks": 6, "peak_bytes": 10**9, "device": "NVIDIA A100", "device_kind": "gpu"}
    path = write_spec(spec, "gpu.tuned.yaml")
    code, out, _ = cli("check", path, "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["status"] == "smoke"
    smoke = verdict["measured"]
    assert (smoke["precision"], smoke["micro_batch"], smoke["accumulation"], smoke["recomputed_blocks"]) == \
        ("fp32", 1, 2, 2)  # accumulation capped at 2, the file's recompute
    code, out, _ = cli("check", path, "--strict", "--json")
    assert code == 1 and json.loads(out)["reasons"][0].startswith("tuned on NVIDIA A100, which this machine lacks")


def test_a_markup_like_spec_name_renders_plainly(fake_cli, write_spec):
    cli, _ = fake_cli(small())
    path = write_spec(mlp_spec(name="exp[/1] [bold]x"))
    code, _, err = cli("probe", path)
    assert code == 0, err
    assert "tuning exp[/1] [bold]x on fake cpu" in err


def test_internal_error_exit_3_with_the_traceback_in_a_file(fake_cli):
    device = small()
    cli, _ = fake_cli(device)

    def broken(s, budget):
        raise ZeroDivisionError("a bug")
    device.result = broken
    code, out, err = cli("probe", SPEC)
    assert code == 3 and out == ""
    line = err.splitlines()[-1]
    assert line.startswith("error: internal error: ZeroDivisionError: a bug (traceback in ")
    path = line.split("traceback in ")[1].split(";")[0]
    with open(path) as handle:
        text = handle.read()
    assert "ZeroDivisionError: a bug" in text and "Traceback" in text
    os.unlink(path)


def test_warnings_are_not_errors(fake_cli, private_cache):
    cli, _ = fake_cli(small())
    cli("probe", SPEC)
    (saved,) = private_cache.glob("*/probes.jsonl")
    saved.write_text(saved.read_text() + "{torn")
    code, _, err = cli("probe", SPEC)
    assert code == 0
    assert "\nwarning: saved results " in "\n" + err and "error: warning" not in err


def test_an_interrupted_run_says_its_best_so_far(fake_cli):
    """Interrupted once a probe fitted: the summary's last lines name the fastest fitting probe so far (the chosen
    line's words), and the count of probes."""
    device = small()
    cli, _ = fake_cli(device)
    interrupt_after(device, 4)
    code, out, err = cli("probe", SPEC, "--json")
    report = json.loads(out)
    assert code == 130 and report["chosen"] is not None
    chosen = report["chosen"]
    assert err.splitlines()[-3:-1] == [
        "interrupted after 4 probe(s): finished probes are saved; run again to resume",
        f"best so far: {chosen['precision']}, micro-batch {chosen['micro_batch']} x accumulation "
        f"{chosen['accumulation']} = 2048; peak {format_bytes(chosen['peak_bytes'])} of 38.0 MiB "
        f"({chosen['peak_bytes'] / (40 * MiB * 0.95):.0%}; budget 40.0 MiB less 5% headroom), "
        f"{chosen['samples_per_sec']:.1f} samples/s"]


def test_a_failed_append_leaves_the_saved_probes_whole(fake_cli, private_cache):
    device = small()
    cli, _ = fake_cli(device)
    original = interrupt_after(device, 2)
    assert cli("probe", SPEC)[0] == 130
    (saved,) = private_cache.glob("*/probes.jsonl")
    before = saved.read_bytes()
    assert before.count(b"\n") == 2
    device.result = original
    with file_size_limit(len(before) + 40):  # the third probe's line is cut off half-way, as on a full disk
        code, out, err = cli("probe", SPEC)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == f"error: cannot save results to {saved}: File too large (earlier results are intact)"
    assert saved.read_bytes() == before
    code, out, _ = cli("probe", SPEC, "--json")
    assert code == 0 and json.loads(out)["reused"] == 2


def test_cpu_budget_auto_is_refused(fake_cli, write_spec):
    cli, backend = fake_cli(small())
    path = write_spec(mlp_spec(budget="auto"))
    code, out, err = cli("probe", path)
    assert (code, out, backend.jobs) == (2, "", [])
    assert err == (f"error: {path}: budget: is required on cpu (a size like 512MiB, or --budget): the CPU budget is "
                   "virtual; 'auto' means a GPU's memory\n")


def test_measure_with_ranks_and_sharding_stages_the_cpu_cannot_run(fake_cli, write_spec):
    cli, backend = fake_cli(small())
    path = write_spec(mlp_spec(devices=2))
    code, out, err = cli("measure", path, "-m", 256, "--sharding-stage", 2, "--json")
    result = json.loads(out)
    assert code == 0 and result["status"] == "unsupported" and backend.jobs == []
    assert err.startswith("fp32 m=256 k=4 r=0 n=2 s=2: unsupported")
    assert result["error"].startswith("sharding stage 2 (group_sharded_parallel) runs on GPU only")
    code, out, _ = cli("measure", path, "-m", 256, "--sharding-stage", 1, "--json")
    result = json.loads(out)
    assert (result["devices"], result["accumulation"], result["sharding_stage"]) == (2, 4, 1)  # 2048 = 256 x 4 x 2


def test_devices_must_share_the_target_batch(fake_cli, write_spec):
    cli, _ = fake_cli(small())
    path = write_spec(mlp_spec(devices=3))
    code, _, err = cli("validate", path)
    assert (code, err) == (2, f"error: {path}: train.target_batch: 2048 cannot be shared by 3 devices: it must be "
                              "a multiple of them\n")


def test_check_on_a_runner_with_fewer_gpus_smokes_or_fails_strictly(fake_cli, write_spec):
    card = FakeDevice(kind="gpu", name="fake A100", card_bytes=80 * 2**30, per_sample=MiB / 20)
    cli, _ = fake_cli(card)
    spec = mlp_spec(device="gpu", budget="auto", devices=16)
    spec["tuned"] = {"precision": "fp16", "micro_batch": 128, "accumulation": 1, "devices": 16, "sharding_stage": 1,
                     "peak_bytes": 10**9, "device": "fake A100", "device_kind": "gpu"}
    path = write_spec(spec, "many.tuned.yaml")
    code, out, _ = cli("check", path, "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["status"] == "smoke"
    assert verdict["notes"][0].startswith("tuned on 16 GPUs, this machine has 8")
    assert (verdict["measured"]["devices"], verdict["measured"]["sharding_stage"]) == (1, 0)
    code, _, _ = cli("check", path, "--strict")
    assert code == 1


def test_a_failing_smoke_probe_fails_the_check(fake_cli, write_spec):
    device = small()
    cli, _ = fake_cli(device, missing={"gpu"})
    spec = mlp_spec(device="gpu", budget="auto")
    spec["tuned"] = {"precision": "fp16", "micro_batch": 512, "accumulation": 4, "peak_bytes": 10**9,
                     "device": "NVIDIA A100", "device_kind": "gpu"}
    device.result = lambda s, budget: __import__("vramtune.core.records", fromlist=["ProbeResult"]).ProbeResult(
        "crashed", s, error="exit code 1 without a result: ImportError: no flash_attn")
    code, out, _ = cli("check", write_spec(spec, "gpu.tuned.yaml"), "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["status"] == "fail"
    assert verdict["reasons"] == ["the spec no longer trains: crashed: exit code 1 without a result: ImportError: "
                                  "no flash_attn"]


def test_apply_sets_aside_a_damaged_summary_and_unreadable_results_then_tunes_again(fake_cli, private_cache, tmp_path):
    cli, backend = fake_cli(small())
    assert cli("apply", SPEC, "-o", tmp_path / "a.yaml")[0] == 0
    probes = len(backend.jobs)
    (summary,) = private_cache.glob("*/summary.json")
    (saved,) = private_cache.glob("*/probes.jsonl")
    summary.write_text('{"spec": "mlp", "chosen": ')  # torn
    saved.write_bytes(b"\xff\xfe not utf-8")
    code, _, err = cli("apply", SPEC, "-o", tmp_path / "b.yaml")
    assert code == 0, err
    assert "warning: saved summary" in err and "is damaged" in err and "moved to summary.json.bad-" in err
    assert "warning: saved results" in err and "unreadable" in err
    assert len(backend.jobs) == 2 * probes  # nothing trusted: probed again
    assert (tmp_path / "a.yaml").read_text() == (tmp_path / "b.yaml").read_text()


def test_plot_draws_the_saved_probes_as_a_png(fake_cli, tmp_path):
    cli, _ = fake_cli(small())
    code, out, err = cli("plot", SPEC, "-o", tmp_path / "memory.png", "--budget", "30MiB")
    assert (code, out, err) == (2, "", "error: no saved results for mlp-python-cpu within 30.0 MiB on fake cpu: run "
                                       f"`vramtune probe {SPEC} --budget 30MiB` first\n")
    assert cli("probe", SPEC)[0] == 0
    code, _, err = cli("plot", SPEC, "-o", tmp_path / "memory.png")
    assert code == 0 and err.endswith(f"wrote {tmp_path / 'memory.png'}\n")
    assert (tmp_path / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_gpu_tuned_to_o2_exports_fp16_opt_level_o2_and_o1_only_when_asked(fake_cli, write_spec):
    card = FakeDevice(kind="gpu", name="fake A100 40GB", card_bytes=40 * 2**30, fixed=8 * 2**30, per_sample=2**30,
                      amp_factor=0.55, amp_speed=2.0, amp_cast_bytes=2**30, o2_factor=0.5, o2_speed=1.1)
    cli, _ = fake_cli(card)
    spec = write_spec(mlp_spec(device="gpu", budget="auto", **{"train.target_batch": 32}), "gpu.yaml")
    code, out, err = cli("apply", spec, "-o", "-", "--format", "paddlenlp")
    arguments = json.loads(out)
    assert code == 0, err
    assert (arguments["fp16"], arguments["bf16"], arguments["fp16_opt_level"]) == (True, False, "O2")
    code, out, err = cli("apply", spec, "-o", "-", "--format", "paddlenlp", "--precision", "fp16",
                         "--precision", "bf16")
    arguments = json.loads(out)
    assert code == 0 and arguments["fp16_opt_level"] == "O1", err


def test_check_on_fewer_ranks_than_tuned_with_devices(fake_cli, write_spec):
    card = FakeDevice(kind="gpu", name="fake A100", card_bytes=80 * 2**30, per_sample=MiB / 20)
    cli, _ = fake_cli(card)  # 8 GPUs
    spec = mlp_spec(device="gpu", budget="auto", devices=16)
    tuned = {"precision": "fp16", "micro_batch": 128, "accumulation": 1, "devices": 16, "sharding_stage": 0,
             "reserved_bytes": card.reserved(Strategy(precision="fp16", micro_batch=128, devices=16)),
             "budget_bytes": 80 * 2**30, "device": "fake A100", "device_kind": "gpu"}
    path = write_spec({**spec, "tuned": tuned}, "many.tuned.yaml")
    code, out, err = cli("check", path, "--devices", 8, "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["status"] == "pass", err
    assert (verdict["measured"]["devices"], verdict["measured"]["micro_batch"]) == (8, 128)
    assert verdict["notes"][0] == ("measured on 8 ranks, tuned on 16: each rank's micro-batch and accumulation as "
                                   "tuned, 1024 samples per step instead of 2048")
    code, out, _ = cli("check", path, "--devices", 1, "--json")
    assert json.loads(out)["notes"][1] == ("one rank runs without data parallel's gradient buffers: a pass may not "
                                           "hold on the tuned ranks")
    path = write_spec({**spec, "tuned": {**tuned, "sharding_stage": 1}}, "sharded.tuned.yaml")
    code, out, _ = cli("check", path, "--devices", 8, "--json")
    assert json.loads(out)["notes"][1] == ("sharding stage 1 splits the state over 8 ranks, not 16: each rank holds "
                                           "more than it will in training, so a pass holds there and a fail may not")
    code, out, _ = cli("check", path, "--devices", 1, "--json")  # sharding says it, data parallel does not again
    notes = json.loads(out)["notes"]
    assert notes[1] == ("sharding stage 1 needs 2 ranks or more: measured without it, and without data parallel's "
                        "gradient buffers, so a pass may not hold on the tuned ranks")
    assert not any(note.startswith("one rank runs") for note in notes)
    assert json.loads(out)["measured"]["sharding_stage"] == 0
    code, out, _ = cli("check", path, "--devices", 32, "--json")
    notes = json.loads(out)["notes"]
    assert code == 0 and "each rank holds less than it will in training" in notes[1]
    assert any(note.startswith("--devices 32 needs 32 GPUs, this machine has 8") for note in notes), notes
    code, _, err = cli("check", path, "--devices", 32, "--strict", "--json")
    assert code == 1
    code, _, err = cli("check", path, "--devices", 0)
    assert code == 2 and "should be greater than or equal to 1" in " ".join(err.replace("│", " ").split())
