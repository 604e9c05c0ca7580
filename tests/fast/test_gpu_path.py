"""The GPU path's predicted first-run failures (issue 37), each fixed and checked here without Paddle: over fake
devices, fixtures quoting Paddle's own message formats (each says which source it quotes), and stand-ins for the one
call involved. None of these is a measurement."""
from __future__ import annotations

import json

from fakes import FakeDevice

from vramtune.probing.ranks import merge


def rank_result(peak: int, weights: int, seconds: float = 0.1) -> dict:
    return {"status": "measured", "peak_bytes": peak, "reserved_bytes": peak, "step_seconds": seconds,
            "weight_bytes": weights, "gradient_bytes": weights, "optimizer_bytes": 2 * weights}


# -- item 2: each rank reads its own GPU ------------------------------------------------------------------------
def test_a_rank_measures_on_the_gpu_the_launcher_selected_for_it(monkeypatch):
    from vramtune.child.rank import device_ordinal

    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    monkeypatch.setenv("FLAGS_selected_gpus", "3")  # exported by the user, outside the launcher: not ours
    assert device_ordinal(2) == 2
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    assert device_ordinal(2) == 3  # what Paddle's ParallelEnv.device_id reads: init_parallel_env's place
    monkeypatch.delenv("FLAGS_selected_gpus")
    assert device_ordinal(2) == 2


def test_a_rank_whose_peak_is_below_its_own_weights_fails_the_probe_its_counters_read_another_device():
    merged = merge([rank_result(900, 100), rank_result(3, 100)], ["", ""])
    assert merged["status"] == "crashed"
    assert merged["error"].startswith("rank 1 reported a peak of 3 B, below its own weights (100 B)")
    assert merge([rank_result(900, 100), rank_result(800, 100)], ["", ""])["rank_peak_bytes"] == [900, 800]


# -- item 4: an OOM raises at once, not after Paddle's RetryAllocator waited 10 s -------------------------------
def test_every_gpu_probe_and_the_budget_check_run_without_the_allocators_retry():
    from fakes import GiB, gpu

    from vramtune.doctor.budget import BudgetEnforced
    from vramtune.probing.runner import gpu_memory_limit_env

    card = gpu("fake A100 80GB", 80).device()
    no_retry = {"FLAGS_gpu_allocator_retry_time": "0"}  # allocator_facade.cc: no RetryAllocator when not > 0
    assert gpu_memory_limit_env(card, 20 * GiB) == {"FLAGS_gpu_memory_limit_mb": str(20 * 1024), **no_retry}
    assert gpu_memory_limit_env(card, card.total_bytes) == no_retry
    assert BudgetEnforced().env(card) == {"FLAGS_gpu_memory_limit_mb": "256", **no_retry}
    assert gpu_memory_limit_env(FakeDevice().device(), 1 << 20) == {}


# -- item 8: Paddle's GPU out-of-memory text, and an abort on it ------------------------------------------------
# A GPU OOM as Python sees it (a fixture, figures made up): BadAlloc's what() is GetCompleteTraceBackString
# (phi/core/enforce.h: the C++ traceback, then the summary banner) around cuda_allocator.cc's ResourceExhausted
# message, with its FLAGS_gpu_memory_limit_mb fragment; format strings quoted from Paddle's sources.
GPU_OOM = ("\n\n--------------------------------------\nC++ Traceback (most recent call last):\n"
           "--------------------------------------\n0   paddle::memory::allocation::Allocator::Allocate(unsigned long)\n"
           "1   paddle::memory::allocation::StatAllocator::AllocateImpl(unsigned long)\n"
           "10  std::string phi::enforce::GetCompleteTraceBackString<std::string >(std::string&&, char const*, int)\n"
           "\n----------------------\nError Message Summary:\n----------------------\n"
           "ResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0, "
           "10.500000GB memory has been allocated and available memory is only 512.000000MB.\n\n"
           "Please check whether there is any other process using GPU 0.\n"
           "1. If yes, please stop them, or start PaddlePaddle on another GPU.\n"
           "2. If no, please decrease the batch size of your model. Or set environment variable "
           "`FLAGS_gpu_memory_limit_mb` to a larger value. Currently `FLAGS_gpu_memory_limit_mb` is 11264, so the "
           "maximum GPU memory usage is limited to 11264 MB.\n   The command is `export FLAGS_gpu_memory_limit_mb=xxx`."
           "\n (at /paddle/paddle/phi/core/memory/allocation/cuda_allocator.cc:71)\n")
GPU_OOM_LINE = ("Out of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0, 10.500000GB memory has been "
                "allocated and available memory is only 512.000000MB. (FLAGS_gpu_memory_limit_mb=11264)")


def test_a_gpu_oom_is_said_by_its_sizes_not_by_paddles_banner():
    from vramtune.core.text import error_line, short_error

    assert short_error(MemoryError(GPU_OOM)) == f"MemoryError: {GPU_OOM_LINE}"
    assert error_line(GPU_OOM, last=True) == GPU_OOM_LINE
    assert error_line("Traceback ...\nValueError: width must be even") == "ValueError: width must be even"


def test_a_child_aborted_by_an_uncaught_bad_alloc_is_oom_not_crashed():
    from vramtune.probing.runner import ChildOutcome, classify

    tail = ("terminate called after throwing an instance of 'paddle::memory::allocation::BadAlloc'\n  what():  "
            + GPU_OOM)
    result = classify(ChildOutcome(-6, False, tail, 1.0), None, 60)
    assert result == {"status": "oom", "error": f"killed by SIGABRT: {GPU_OOM_LINE}"}
    assert classify(ChildOutcome(-6, False, "double free", 1.0), None, 60)["status"] == "crashed"


# -- item 7: --device gpu:N with several ranks --------------------------------------------------------------------
def test_the_launcher_is_given_the_ranks_gpus_by_the_labels_it_selects_by():
    from vramtune.core.records import Device
    from vramtune.core.strategy import Strategy
    from vramtune.probing.ranks import launcher

    card = Device("gpu", 1, "fake A100 80GB", 80 << 30, "3.3.1", count=4)
    launch = launcher(Strategy(devices=2), card, ["probe"], {})
    assert launch.argv[launch.argv.index("--devices") + 1] == "1,2"
    visible = launcher(Strategy(devices=2), card, ["probe"], {"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert visible.argv[visible.argv.index("--devices") + 1] == "5,6"  # launch/context/device.py: labels.index
    cpu = Device("cpu", 0, "fake cpu", 64 << 30, "3.3.1", count=8)
    assert "--devices" not in launcher(Strategy(devices=2), cpu, ["probe"], {}).argv


def test_ranks_past_the_last_gpu_are_unsupported_before_any_probe():
    from vramtune.core.records import Device
    from vramtune.core.strategy import Strategy
    from vramtune.mechanisms.data_parallel import DataParallel

    card = Device("gpu", 3, "fake A100 80GB", 80 << 30, "3.3.1", count=4)
    assert DataParallel().unsupported(Strategy(devices=2), card) == ("2 ranks from gpu:3 need GPUs 3 to 4; this "
                                                                     "machine has 4 (0 to 3)")
    assert DataParallel().unsupported(Strategy(devices=1), card) is None


def test_a_rank_paddle_exited_for_a_gpu_that_is_not_there_is_said_so_not_the_oom_killer():
    # place.cc's CUDAPlace check logs this (glog) and calls std::exit(-1): no Python error, exit 255
    log = ("E0101 12:00:00.000000 1234 place.cc:48] Invalid CUDAPlace(4), must inside [0, 4), because GPU number on "
           "your machine is 4")
    merged = merge([rank_result(900, 100), None], ["", log])
    assert merged == {"status": "crashed", "error": f"rank 1 asked Paddle for a GPU that is not there: {log}"}


def test_the_doctors_two_ranks_run_on_the_gpus_it_checks(monkeypatch):
    import json

    from vramtune.core.records import Device
    from vramtune.doctor import ranks, running
    from vramtune.probing.runner import ChildOutcome

    started = []

    class Started:
        def __init__(self, argv, env, stderr, cwd=None, graceful=False):
            started.append(argv)

        def run(self, timeout):
            return ChildOutcome(1, False, "", 0.1)

    monkeypatch.setattr(running, "ChildProcess", Started)
    card = Device("gpu", 2, "fake A100 80GB", 80 << 30, "3.3.1", count=4)
    running.ChildChecks().run(ranks.CHECK, json.dumps(card.to_json()), "", {}, 1.0)
    assert started[0][started[0].index("--devices") + 1] == "2,3"


# -- item 9: a breakdown never has a negative part ----------------------------------------------------------------
def test_a_state_counted_above_the_peak_gives_no_breakdown_rather_than_negative_activations():
    from vramtune.core.records import ProbeResult
    from vramtune.core.strategy import Strategy

    over = ProbeResult("fits", Strategy(), peak_bytes=100, weight_bytes=80, gradient_bytes=80, optimizer_bytes=0)
    assert over.breakdown() is None
    fine = ProbeResult("fits", Strategy(), peak_bytes=200, weight_bytes=80, gradient_bytes=80, optimizer_bytes=0)
    assert fine.breakdown()["activations"] == 40


# -- item 1: a model whose attention kernel cannot run fp32 on a GPU ---------------------------------------------
FLASHMASK_FP32 = ("flashmask attention has GPU kernels for float16 and bfloat16 only (Paddle registers flash_attn and "
                  "flashmask_attention for those): fp32 cannot run it; to measure fp32, set _attn_implementation: "
                  "sdpa (or eager)")


def formers_config(tmp_path, *edits: tuple[str, str], name: str = "sft.yaml"):
    """The demo PaddleFormers config with the attention left at PaddleFormers' default (flashmask) and bf16 (its
    default compute_type), for a GPU."""
    from conftest import formers_demo

    return formers_demo(tmp_path, ("_attn_implementation: eager  # flashmask (the default) has no CPU kernel\n", ""),
                        ("compute_type: float32  # bf16 is the default; CPUs train in float32\n", ""),
                        ("device: cpu\n", ""), *edits, name=name)


def test_fp32_with_flashmask_on_a_gpu_is_unsupported_before_any_probe(fake_cli, tmp_path, monkeypatch):
    from fakes import gpu

    from vramtune.core.strategy import Strategy
    from vramtune.spec.files import load_spec
    from vramtune.tuning.session import unsupported

    monkeypatch.chdir(tmp_path)
    card = gpu("fake A100 80GB", 80, noise=0.0)
    spec = load_spec(formers_config(tmp_path))
    assert unsupported(Strategy(precision="fp32"), card.device(), spec) == FLASHMASK_FP32
    assert unsupported(Strategy(precision="bf16"), card.device(), spec) is None
    assert unsupported(Strategy(precision="fp32"), FakeDevice().device(), spec) is None  # the CPU probes eager
    sdpa = load_spec(formers_config(tmp_path, ("lora: true", "lora: true\n_attn_implementation: sdpa"),
                                    name="sdpa.yaml"))
    assert unsupported(Strategy(precision="fp32"), card.device(), sdpa) is None
    cli, backend = fake_cli(card)
    code, out, err = cli("probe", tmp_path / "sft.yaml", "--budget", "64MiB", "--json")
    report = json.loads(out)
    assert code == 0, err
    assert backend.jobs and all(job.strategy["precision"] != "fp32" for job in backend.jobs)
    assert f"fp32 skipped: {FLASHMASK_FP32}" in report["notes"]
    plain = report["probes"][0]
    assert (plain["precision"], plain["status"], plain["error"]) == ("fp32", "unsupported", FLASHMASK_FP32)


def test_fp32_with_paddlenlps_flash_attention_on_a_paddle_2_gpu_is_unsupported(write_spec):
    from conftest import SPECS

    from vramtune.core.records import Device
    from vramtune.core.strategy import Strategy
    from vramtune.spec.files import load_spec
    from vramtune.tuning.session import unsupported

    spec = load_spec(write_spec({"name": "llama", "device": "gpu", "budget": "auto", "train": {"target_batch": 8},
                                 "model": {"source": "paddlenlp", "config": str(SPECS / "tiny-llama"),
                                           "config_fields": {"use_flash_attention": True}},
                                 "data": {"seq_len": 128}}))
    card = Device("gpu", 0, "fake A100 80GB", 80 << 30, "2.6.2", count=1)
    why = unsupported(Strategy(precision="fp32"), card, spec)
    assert why is not None and why.startswith("use_flash_attention: PaddleNLP's flash attention runs on Paddle "
                                              "2.6's flash_attn, which has GPU kernels for float16 and bfloat16 only")
    assert unsupported(Strategy(precision="bf16"), card, spec) is None


# -- item 5: shared machines: the physical GPU, what it has free, what others hold ------------------------------
class FakeCuda:
    """A stand-in for libcuda.so.1's four driver calls: two GPUs, as the driver formats their bus ids."""

    BUSES = (b"0000:3B:00.0", b"0000:AF:00.0")

    def cuInit(self, flags):
        return 0

    def cuDeviceGetCount(self, count):
        count._obj.value = len(self.BUSES)
        return 0

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = ordinal
        return 0

    def cuDeviceGetPCIBusId(self, text, size, device):
        text.value = self.BUSES[device.value]
        return 0


def test_each_gpu_is_known_by_its_pci_bus_id_from_the_cuda_driver():
    from vramtune.core.gpu import bus_id, pci_bus_ids

    assert pci_bus_ids(lambda name: FakeCuda()) == ["0000:3b:00.0", "0000:af:00.0"]

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")
    assert pci_bus_ids(missing) == []
    assert bus_id("00000000:3B:00.0") == bus_id("0000:3b:00.0") == "0000:3b:00.0"  # nvidia-smi's, CUDA's


def test_nvidia_smi_says_what_each_card_holds_and_for_whom():
    import subprocess

    from vramtune.core.gpu import CardUse, card_use

    answers = {"--query-gpu=pci.bus_id,memory.total,memory.used,memory.free":
               "00000000:3B:00.0, 81920, 20480, 61440\n00000000:AF:00.0, 81920, 0, 81920\n",
               "--query-compute-apps=pid,gpu_bus_id": "1234, 00000000:3B:00.0\n5678, 00000000:3B:00.0\n"}

    def smi(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, answers[argv[1]], "")
    assert card_use(smi) == {"0000:3b:00.0": CardUse(80 << 30, 20 << 30, 60 << 30, [1234, 5678]),
                             "0000:af:00.0": CardUse(80 << 30, 0, 80 << 30, [])}

    def absent(argv, **kwargs):
        raise FileNotFoundError("nvidia-smi")
    assert card_use(absent) is None


def test_a_gpu_lock_is_the_physical_cards_for_every_user_and_every_visible_numbering(monkeypatch, tmp_path):
    import tempfile

    from vramtune.core.records import Device
    from vramtune.probing.store import device_lock_paths

    monkeypatch.delenv("VRAMTUNE_LOCKS")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    first = Device("gpu", 0, "A100", 80 << 30, "3.3.1", count=2, buses=["0000:3b:00.0", "0000:af:00.0"])
    other_numbering = Device("gpu", 1, "A100", 80 << 30, "3.3.1", count=2, buses=["0000:af:00.0", "0000:3b:00.0"])
    (lock,) = device_lock_paths(first)
    assert device_lock_paths(other_numbering) == [lock]
    assert lock == tmp_path / "vramtune-locks" / "gpu-0000:3b:00.0.lock"  # one folder for every user
    assert device_lock_paths(first, ranks=2) == [lock, tmp_path / "vramtune-locks" / "gpu-0000:af:00.0.lock"]


def test_a_multi_rank_probe_holds_every_ranks_gpu(fake_cli, write_spec, monkeypatch):
    from conftest import mlp_spec
    from fakes import gpu

    from vramtune.probing import store

    held = []
    real = store.file_lock

    def recording(path, on_wait, what):
        held.append(path.name)
        return real(path, on_wait, what)
    monkeypatch.setattr(store, "file_lock", recording)
    cli, _ = fake_cli(gpu("fake A100 80GB", 80, noise=0.0))
    spec = write_spec(mlp_spec(device="gpu", budget="auto", **{"train.target_batch": 64}))
    assert cli("measure", spec, "--micro-batch", "8", "--devices", "2")[0] == 0
    assert held == ["gpu0.lock", "gpu1.lock"]  # the fake card has no bus ids: its ordinals


def test_budget_auto_on_a_gpu_is_what_the_card_has_free_said_in_the_output(fake_cli, write_spec):
    from conftest import mlp_spec
    from fakes import GiB, gpu

    card = gpu("fake A100 80GB", 80, noise=0.0, free_bytes=60 * GiB, holders=[1234, 5678])
    cli, _ = fake_cli(card)
    spec = write_spec(mlp_spec(device="gpu", budget="auto", **{"train.target_batch": 64}))
    code, out, err = cli("probe", spec, "--json")
    report = json.loads(out)
    assert code == 0 and report["budget_bytes"] == 60 * GiB, err
    said = ("budget auto: 60.0 GiB, what fake A100 80GB has free now (80.0 GiB card; 20.0 GiB in use, by processes "
            "1234, 5678)")
    assert report["notes"][0] == said and "within 60.0 GiB" in err
    code, _, err = cli("measure", spec, "--micro-batch", "8")
    assert code == 0 and f"note: {said}" in err


def test_an_oom_beside_other_processes_memory_says_so():
    from vramtune.core.gpu import CardUse
    from vramtune.probing.runner import beside_others

    GiB = 1 << 30
    oom = {"status": "oom", "error": "MemoryError: Out of memory error on GPU 0.", "reserved_at_oom": 10 * GiB}
    crowded = CardUse(40 * GiB, 30 * GiB, 10 * GiB, [4242])
    said = beside_others(oom, crowded, 20 * GiB)
    assert said["error"] == ("MemoryError: Out of memory error on GPU 0.; with 10.0 GiB reserved of the 20.0 GiB "
                             "budget: other processes held 30.0 GiB of the 40.0 GiB card when the probe started "
                             "(pids 4242), so the budget was not all free")
    assert beside_others(oom, CardUse(40 * GiB, 1 * GiB, 39 * GiB), 20 * GiB) == oom  # room for the budget
    assert beside_others(oom, None, 20 * GiB) == oom  # nvidia-smi could not say
    fits = {"status": "measured", "peak_bytes": 1}
    assert beside_others(fits, crowded, 20 * GiB) == fits


def test_saved_results_answer_for_another_auto_budget_only_where_they_still_hold(fake_cli, write_spec):
    """Budget auto follows what the card has free, run to run: a saved out-of-memory holds for budgets no larger
    than its own, a measured probe is judged again against the new budget."""
    from conftest import mlp_spec
    from fakes import MiB, gpu

    card = gpu("fake 64MiB", 1 / 16, noise=0.0, free_bytes=40 * MiB)
    cli, _ = fake_cli(card)
    spec = write_spec(mlp_spec(device="gpu", budget="auto", **{"train.target_batch": 64}))
    code, out, err = cli("probe", spec, "--json")
    first = json.loads(out)
    ooms = {json.dumps({k: p[k] for k in ("precision", "micro_batch", "accumulation", "recomputed_blocks")})
            for p in first["probes"] if p["status"] == "oom"}
    assert code == 0 and ooms, err
    card.free_bytes = 64 * MiB  # more free now: what ran out at 40 MiB may fit
    calls = len(card.calls)
    code, out, err = cli("probe", spec, "--json")
    second = json.loads(out)
    assert code == 0 and second["budget_bytes"] == 64 * MiB, err
    again = {json.dumps({k: getattr(s, k) for k in ("precision", "micro_batch", "accumulation", "recomputed_blocks")})
             for s in card.calls[calls:]}
    assert ooms <= again  # each probed again
    assert all(p["budget_bytes"] == 64 * MiB for p in second["probes"] if p["reused"] and p["status"] != "oom")
