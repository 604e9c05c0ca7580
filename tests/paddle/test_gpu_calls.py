"""The Paddle calls vramtune's GPU path makes, over stand-ins for exactly those calls (this machine has no GPU): which
device each call is given. The figures the stand-ins return are placeholders; nothing here asserts a measurement."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.paddle


@pytest.fixture
def gpu_calls(monkeypatch):
    """Record every call of the GPU counters and synchronize; the deprecated `paddle.device.cuda.synchronize` (3.3.1:
    "will be removed", and it sets GPU `device_id` current in whichever process calls it) fails the test."""
    import paddle

    calls: list[tuple[str, object]] = []

    def recorder(name, value=0):
        def record(device=None):
            calls.append((name, device))
            return value
        return record

    def deprecated(*args, **kwargs):
        raise AssertionError("paddle.device.cuda.synchronize is deprecated: paddle.device.synchronize replaces it")

    cuda = paddle.device.cuda
    monkeypatch.setattr(cuda, "synchronize", deprecated)
    monkeypatch.setattr(paddle.device, "synchronize", recorder("synchronize"))
    for name in ("reset_max_memory_allocated", "reset_max_memory_reserved"):
        monkeypatch.setattr(cuda, name, recorder(name), raising=False)
    for name in ("max_memory_allocated", "max_memory_reserved", "memory_allocated"):
        monkeypatch.setattr(cuda, name, recorder(name, 1), raising=False)
    return calls


def test_gpu_counters_synchronize_their_own_device_with_the_current_api(gpu_calls):
    from vramtune.child.counters import MemoryCounters

    counters = MemoryCounters("gpu", 1)
    counters.start()
    counters.peak()
    assert [device for name, device in gpu_calls if name == "synchronize"] == ["gpu:1", "gpu:1"]
    assert {device for name, device in gpu_calls if name != "synchronize"} == {1}


def test_the_doctors_gpu_helpers_synchronize_their_own_device_with_the_current_api(gpu_calls):
    from vramtune.core.records import Device
    from vramtune.doctor.workload import allocated_now

    allocated_now(Device("gpu", 2, "stand-in", 1 << 30, "any"))
    assert gpu_calls == [("synchronize", "gpu:2"), ("memory_allocated", 2)]


def gpu_job(tmp_path, monkeypatch, strategy=None, **spec_changes) -> dict:
    """A probe job of the shipped MLP for a stand-in GPU (index 0 of 2), as the session makes it."""
    from conftest import CONFIGS, mlp_spec

    from vramtune.core.records import Budget, Device
    from vramtune.core.strategy import Strategy
    from vramtune.spec import spec_from_dict
    from vramtune.tuning.session import job_for

    monkeypatch.syspath_prepend(str(CONFIGS))  # the factory's module
    spec = spec_from_dict(mlp_spec(**{"device": "gpu", **spec_changes}), str(tmp_path / "spec.yaml"))
    device = Device("gpu", 0, "stand-in GPU", 80 << 30, "3.3.1", count=2)
    return job_for(spec, strategy or Strategy(micro_batch=4, accumulation=1), device, Budget(40 << 20, 0.05)).to_json()


def test_a_rank_trains_and_reads_its_counters_on_the_gpu_the_launcher_selected(gpu_calls, monkeypatch, tmp_path):
    """Rank 1 of a launch that selected GPU 1 for it: set_device, every counter call and synchronize name GPU 1
    (rank 0's GPU, index 0, read from every rank was the bug). set_device is a stand-in, so the model trains on the
    CPU; the counters' figures are stand-ins too."""
    import paddle

    from vramtune.child.worker import run_probe

    placed = []
    monkeypatch.setattr(paddle, "set_device", placed.append)
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    monkeypatch.setenv("FLAGS_selected_gpus", "1")
    result = run_probe(gpu_job(tmp_path, monkeypatch))
    assert result["status"] == "measured", result
    assert placed == ["gpu:1"]
    assert {device for name, device in gpu_calls} == {1, "gpu:1"}


# -- item 9: what sharding stages 2 and 3 leave each rank holding -------------------------------------------------
def stepped_model():
    import paddle

    model = paddle.nn.Sequential(paddle.nn.Linear(64, 64), paddle.nn.Linear(64, 8))
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters())
    model(paddle.randn([4, 64])).mean().backward()
    optimizer.step()
    return model, optimizer


def test_a_weight_stage_3_released_counts_its_slice_not_its_shape():
    """Stage 3 (group_sharded_stage3._param_storage) keeps this rank's slice as `fw_storage` and clears the full
    weight (`_clear_data`: its numel() then raises, its shape stays)."""
    import paddle

    from vramtune.child.training import state_counts

    model, optimizer = stepped_model()
    before = state_counts(model, optimizer)
    weight = model[0].weight
    weight.fw_storage = paddle.zeros([64 * 64 // 2])  # this rank's half
    weight._clear_data()
    after = state_counts(model, optimizer)
    assert after["weight_bytes"] == before["weight_bytes"] - 64 * 64 * 4 // 2


def test_a_gradient_sharding_released_counts_nothing():
    """Stage 2's reduce (group_sharded_stage2 cleanup) releases the gradients this rank does not own with
    clear_gradient(False)."""
    from vramtune.child.training import state_counts

    model, optimizer = stepped_model()
    before = state_counts(model, optimizer)
    model[0].weight.clear_gradient(False)
    assert state_counts(model, optimizer)["gradient_bytes"] == before["gradient_bytes"] - 64 * 64 * 4
