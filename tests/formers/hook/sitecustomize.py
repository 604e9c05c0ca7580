"""Loaded by Python at start-up when this folder is on PYTHONPATH (tests/formers/ runs PaddleFormers' own workflow
so): the Trainer's training peak, from the host allocator's counter reset as train() starts, and its evaluations'
peak (the counter reset as each evaluation starts and after it ends: the training peak is the largest outside
them), written as JSON to $VRAMTUNE_PEAK_FILE when train() returns. On CPU, paddle.device.synchronize() (which the
Trainer calls with gradient accumulation and which raises there: "device should be gpu, xpu") is made a no-op: the
one change made to the workflow, said in the tests' docstring."""
import json
import os

if os.environ.get("VRAMTUNE_PEAK_FILE"):
    import paddle
    from paddleformers.trainer import Trainer

    core = paddle.base.core

    def _synchronize(device=None):
        return None

    if not paddle.is_compiled_with_cuda():
        paddle.device.synchronize = _synchronize
    _train, _evaluate = Trainer.train, Trainer.evaluate
    peaks = {"train": 0, "eval": None}

    def phase_peak(phase):
        """The peak since the last reset, kept as the phase's; the counter reset for the next phase."""
        peak = int(core.host_memory_stat_peak_value("Allocated", 0))
        peaks[phase] = max(peaks[phase] or 0, peak)
        core.host_memory_stat_reset_peak_value("Allocated", 0)

    def evaluate(self, *args, **kwargs):
        phase_peak("train")
        result = _evaluate(self, *args, **kwargs)
        phase_peak("eval")
        return result

    def train(self, *args, **kwargs):
        core.host_memory_stat_reset_peak_value("Allocated", 0)
        result = _train(self, *args, **kwargs)
        phase_peak("train")
        with open(os.environ["VRAMTUNE_PEAK_FILE"], "w") as out:
            json.dump({"peak_bytes": peaks["train"], "eval_peak_bytes": peaks["eval"],
                       "steps": int(self.state.global_step)}, out)
        return result

    Trainer.train, Trainer.evaluate = train, evaluate

if os.environ.get("VRAMTUNE_PEAK_FILE") and os.environ.get("VRAMTUNE_WORST_AUGMENTATION"):
    # PaddleOCR-VL's template augments at random (scale 0.5-1.5, padding 0-15 px): for a peak to compare with the
    # probe's, the workflow's images are augmented at the worst case the probe measures (vl_data.WorstAugmentation)
    from paddleformers.datasets.template import mm_plugin
    from paddleformers.datasets.template.template import TEMPLATES

    from vramtune.dialects.paddleformers.images import MAX_PIXELS, MIN_PIXELS
    from vramtune.dialects.paddleformers.vl_data import WorstAugmentation

    for _template in TEMPLATES.values():
        if isinstance(_template.mm_plugin, mm_plugin.PaddleOCRVLPlugin):
            _template.mm_plugin.image_augmentation = WorstAugmentation(MIN_PIXELS, MAX_PIXELS)
