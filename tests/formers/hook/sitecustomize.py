"""Loaded by Python at start-up when this folder is on PYTHONPATH (tests/formers/ runs PaddleFormers' own workflow
so): the Trainer's training peak, from the host allocator's counter reset as train() starts, is written as JSON to
$VRAMTUNE_PEAK_FILE when train() returns. On CPU, paddle.device.synchronize() (which the Trainer calls with
gradient accumulation and which raises there: "device should be gpu, xpu") is made a no-op: the one change made
to the workflow, said in the tests' docstring."""
import json
import os

if os.environ.get("VRAMTUNE_PEAK_FILE"):
    import paddle
    from paddleformers.trainer import Trainer

    def _synchronize(device=None):
        return None

    if not paddle.is_compiled_with_cuda():
        paddle.device.synchronize = _synchronize
    _train = Trainer.train

    def train(self, *args, **kwargs):
        core = paddle.base.core
        core.host_memory_stat_reset_peak_value("Allocated", 0)
        result = _train(self, *args, **kwargs)
        peak = core.host_memory_stat_peak_value("Allocated", 0)
        with open(os.environ["VRAMTUNE_PEAK_FILE"], "w") as out:
            json.dump({"peak_bytes": int(peak), "steps": int(self.state.global_step)}, out)
        return result

    Trainer.train = train
