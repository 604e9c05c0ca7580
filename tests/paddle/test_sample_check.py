"""The one-sample check runs as the probe trains: after every mechanism prepared the model, through the network
that trains, inside the mechanisms' forward context (AMP's auto_cast); a kernel Paddle does not have for the
device and dtype (flash attention in fp32 on a GPU) is `unsupported`, not bad data. Real Paddle on CPU; the kernel's
error is a fixture quoting kernel_factory.cc's message."""
from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap

import pytest

pytestmark = pytest.mark.paddle

WATCHED = textwrap.dedent('''
    import paddle

    STATE = {"prepared": False, "inside": False, "raise": None}
    SEEN = []


    class Watched(paddle.nn.Layer):
        """Records, at each forward, whether the mechanisms prepared the model and whether it runs in their
        forward context; raises STATE["raise"] where one is set."""

        def __init__(self):
            super().__init__()
            self.linear = paddle.nn.Linear(8, 2)

        def forward(self, x):
            SEEN.append((STATE["prepared"], STATE["inside"]))
            if STATE["raise"]:
                raise RuntimeError(STATE["raise"])
            return self.linear(x)


    def build():
        return Watched()
''')
# kernel_factory.cc's message for a GPU kernel registered for other dtypes only, with no CPU one to fall back to
NO_FP32_KERNEL = ("(NotFound) The kernel with key (GPU, Undefined(AnyLayout), float32) of kernel `flashmask_attention` "
                  "is not registered and fail to fallback to CPU one. Selected wrong DataType `float32`. Paddle support "
                  "following DataTypes: float16, bfloat16.\n  [Hint: Expected kernel_iter != iter->second.end(), but "
                  "received kernel_iter == iter->second.end().] (at /paddle/paddle/phi/core/kernel_factory.cc:351)")


@pytest.fixture
def watched(tmp_path, monkeypatch):
    """(the watched module, a probe job of it on the CPU): the precision mechanism's prepare_training and
    forward_context replaced by stand-ins that set the module's flags."""
    from vramtune.core.records import Budget
    from vramtune.core.strategy import Strategy
    from vramtune.mechanisms.precision import MECHANISM as precision
    from vramtune.probing.runner import ChildBackend
    from vramtune.spec import spec_from_dict
    from vramtune.tuning.session import job_for

    (tmp_path / "watched.py").write_text(WATCHED)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("watched", None)  # this test's own, fresh
    module = importlib.import_module("watched")

    def prepare_training(model, optimizer, strategy, settings):
        module.STATE["prepared"] = True
        return model, optimizer

    @contextlib.contextmanager
    def inside():
        module.STATE["inside"] = True
        try:
            yield
        finally:
            module.STATE["inside"] = False

    monkeypatch.setattr(precision, "prepare_training", prepare_training)
    monkeypatch.setattr(precision, "forward_context", lambda strategy, settings: inside())
    spec = spec_from_dict({"name": "watched", "device": "cpu", "budget": "64MiB", "train": {"target_batch": 4},
                           "model": {"source": "python", "factory": "watched:build"},
                           "data": {"inputs": [{"shape": [8], "dtype": "float32"}],
                                    "labels": {"shape": [], "dtype": "int64", "high": 2}},
                           "probe": {"steps": 1, "warmup": 1}}, str(tmp_path / "spec.yaml"))
    device = ChildBackend().describe("cpu")
    job = job_for(spec, Strategy(micro_batch=4, accumulation=1), device, Budget(64 << 20, 0.05))
    yield module, job
    sys.modules.pop("watched", None)


def test_the_sample_check_runs_the_prepared_network_inside_the_forward_context(watched):
    from vramtune.child.worker import run_probe

    module, job = watched
    result = run_probe(job.to_json())
    assert result["status"] == "measured", result
    assert module.SEEN[0] == (True, True)  # the first forward is the sample check's
    assert all(seen == (True, True) for seen in module.SEEN)


@pytest.mark.parametrize("check_sample", [True, False])
def test_a_kernel_paddle_lacks_for_the_dtype_is_unsupported_not_bad_data(watched, check_sample):
    from vramtune.child.worker import run_probe

    module, job = watched
    module.STATE["raise"] = NO_FP32_KERNEL
    job.check_sample = check_sample
    result = run_probe(job.to_json())
    assert result["status"] == "unsupported" and "error_kind" not in result, result
    assert result["error"].startswith("Paddle has no flashmask_attention kernel for this device and dtype (float16 "
                                      "and bfloat16 only on a GPU): (NotFound) The kernel with key (GPU, "
                                      "Undefined(AnyLayout), float32) of kernel `flashmask_attention` is not registered")
