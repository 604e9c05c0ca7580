"""PaddleOCR recognition configs (`python tools/train.py -c configs/rec/...yml -o Key=value`).

The batch is `Train.sampler.first_bs` where the config has a sampler (PP-OCRv5: anchored `&bs`, aliased by
`Train.loader.batch_size_per_card`), else `Train.loader.batch_size_per_card`. A multi-scale sampler trains each
scale (w, h) at its own batch, first_bs x w0 x h0 / (w x h) unless fix_bs: a probe trains every scale in turn and
its peak is the largest. Evaluation (`Global.eval_batch_step`) at `Eval.loader.batch_size_per_card`, on the Eval
transforms' image shape, is tuned too. AMP: `Global.use_amp`, `amp_level` (O2 by default), `amp_dtype`;
`Global.to_static`. PaddleOCR neither accumulates gradients nor recomputes: a smaller batch is a smaller effective
batch.

The probe builds what tools/train.py builds, in its order, with the kit's own code: the post-processing first (its
character count sets the heads' sizes), the model, the loss; the batch is the kit's own label encoding of a text as
long as the dictionary and max_text_length allow, in the config's KeepKeys order; the forward is the algorithm's
(`model(images, data=batch[1:])` for SVTR, NRTR, ... as tools/program.py calls it). Text detection (det) is
paddleocr_det.py's; table and formula configs are refused by name."""
from __future__ import annotations

import os
from typing import Any, ClassVar

import yaml

from vramtune.core.errors import BuildError
from vramtune.dialects.kits import paddleocr_det as det
from vramtune.dialects.kits.codec import (
    STATIC_KEY,
    amp_choices,
    compiled,
    eval_phase,
    evaluated_batch,
    paddle_amp,
    search_off,
    stated_precision,
)
from vramtune.dialects.kits.config import Kit, KitError, KitSource, apply_options, eager_parameters, get_key
from vramtune.dialects.kits.loader import ReadAhead, kit_read_ahead
from vramtune.dialects.kits.ocr_ema import Swaps, ema, evaluates, held_state, kept_copies
from vramtune.dialects.kits.source import kit_code, terms_note
from vramtune.dialects.kits.spec import kit_spec, positive_batch, smaller_batch

FIRST_BS, PER_CARD, EVAL_BATCH = ("Train.sampler.first_bs", "Train.loader.batch_size_per_card",
                                  "Eval.loader.batch_size_per_card")
OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "momentum": "momentum", "sgd": "sgd"}
# tools/program.py: algorithms whose forward takes the labels too
EXTRA_INPUT = ("SRN", "NRTR", "SAR", "SEED", "SVTR", "SVTR_LCNet", "SPIN", "VisionLAN", "RobustScanner", "RFL",
               "DRRG", "SATRN", "SVTR_HGNet", "ParseQ", "CPPD")
# ppocr/modeling/architectures apply_to_static: the algorithms tools/train.py can compile (it asserts, else)
STATIC = ("DB", "SVTR_LCNet", "TableMaster", "LayoutXLM", "SLANet", "SVTR", "SVTR_HGNet", "LaTeXOCR", "UniMERNet",
          "PP-FormulaNet-S", "PP-FormulaNet-L")
LR_ADVICE = ("PaddleOCR cannot accumulate gradients: the effective batch falls from {target} to {batch} per card. "
             "Its configs tie each learning rate to the total batch it was set for (`learning_rate: 0.001 # 8gpus "
             "192bs`): scale Optimizer.lr.learning_rate with the batch (linear scaling: x{ratio:.3g} here)")


def batch_key(config: dict[str, Any]) -> str:
    return FIRST_BS if get_key(config, FIRST_BS) is not None else PER_CARD


def scales(config: dict[str, Any], first_bs: int) -> list[tuple[int, int, int]]:
    """(width, height, batch) of each scale as MultiScaleSampler computes them; one (0, 0, first_bs) without."""
    sampler = get_key(config, "Train.sampler") or {}
    if sampler.get("name") != "MultiScaleSampler":
        return [(0, 0, first_bs)]
    given = sampler.get("scales") or [[320, 32]]
    widths, heights = ([s[0] for s in given], [s[1] for s in given]) if isinstance(given[0], list) else (given, given)
    factor = sampler.get("divided_factor", [8, 16])
    base = widths[0] * heights[0] * first_bs
    pairs = []
    for width, height in zip(widths, heights):
        width, height = int(width // factor[0] * factor[0]), int(height // factor[1] * factor[1])
        pairs.append((width, height, first_bs if sampler.get("fix_bs", True) else int(max(1, base / (height * width)))))
    return pairs


def eval_shape(config: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of an evaluation image: the Eval transforms' resize, else d2s_train_image_shape."""
    for op in get_key(config, "Eval.dataset.transforms", []) or []:
        name, params = next(iter(op.items())) if isinstance(op, dict) and op else (None, None)
        shape = (params or {}).get("image_shape")
        if name and "Resize" in name and isinstance(shape, list) and len(shape) == 3:
            return int(shape[1]), int(shape[2])
    shape = get_key(config, "Global.d2s_train_image_shape", [3, 48, 320])
    return int(shape[1]), int(shape[2])


def refuse_unmeasured(config: dict[str, Any], path: Any) -> None:
    """KitError naming a key that changes the kit's memory in a way the probe does not measure."""
    algorithm = get_key(config, "Architecture.algorithm")
    if get_key(config, "Global.use_sync_bn"):
        raise KitError(f"{path}: Global.use_sync_bn: SyncBatchNorm is not measured in this version (probe with -O "
                       "Global.use_sync_bn=False: on one card it keeps the same statistics)")
    if algorithm == "SRN":
        raise KitError(f"{path}: Architecture.algorithm SRN: tools/program.py averages its weights before it "
                       "evaluates (paddle.incubate.ModelAverage), which is not measured in this version")
    shape = get_key(config, "Global.d2s_train_image_shape")
    if get_key(config, STATIC_KEY) and (algorithm not in STATIC or shape is None):
        raise KitError(f"{path}: {STATIC_KEY}: the kit compiles only {', '.join(STATIC)}, and only with "
                       f"Global.d2s_train_image_shape (its input shape); this config has {algorithm} and "
                       f"{shape}: tools/train.py would stop there")


def amp_op_lists(config: dict[str, Any]) -> dict[str, list[str]]:
    """The kit's AMP op lists (Global.amp_custom_black_list / _white_list) as the spec's, which the probe's AMP
    applies as the kit's auto_cast does."""
    return {key: ops for key in ("amp_custom_black_list", "amp_custom_white_list")
            if (ops := get_key(config, f"Global.{key}"))}


class PaddleOCR(Kit):
    def evaluated_once(self, steps: int) -> tuple[list[str], str, str] | None:
        """tools/program.py's train() evaluates where `global_step > start and (global_step - start) % every == 0`
        (Global.eval_batch_step = [start, every]): [0, steps] evaluates right after step `steps`, once, over the
        whole Eval set, with the EMA's swap where the config has one."""
        return [f"Global.eval_batch_step=[0,{steps}]"], "tools.program:eval", EVAL_BATCH

    def value(self, text: str) -> Any:
        """tools/program.py reads -o values as YAML, all of them after one -o."""
        return yaml.safe_load(text)

    def option_text(self, value: Any) -> str:
        from vramtune.dialects.roundtrip import value_text

        return value_text(value)

    def spec(self, raw, path, options):
        config = apply_options(raw, options, self.value)
        model_type = get_key(config, "Architecture.model_type")
        detection = model_type == "det"  # text detection: paddleocr_det.py
        if not detection and (model_type != "rec" or get_key(config, "Architecture.algorithm") == "Distillation"):
            raise KitError(f"{path}: Architecture.model_type {model_type} "
                           f"({get_key(config, 'Architecture.algorithm')}): only recognition models (rec, not "
                           "distilled) and text detection (det) are measured in this version")
        refuse_unmeasured(config, path)
        batch = positive_batch(config, batch_key(config), path)
        optimizer = str(get_key(config, "Optimizer.name", "Adam")).lower()
        warnings = [] if optimizer in OPTIMIZERS else [
            f"{path}: Optimizer.name {optimizer}: measured with AdamW's state (8 bytes per weight)"]
        warnings += det.warnings(config, path, str(self.checkout(path))) if detection else []
        train = {"target_batch": batch, "optimizer": OPTIMIZERS.get(optimizer, "adamw"), "learning_rate": 0.001,
                 **amp_op_lists(config)}
        if evaluates(config):
            train.update(eval_phase(get_key(config, EVAL_BATCH, batch)))
        # accumulation only lets the search measure a smaller batch; apply writes it as the kit's batch. No BatchNorm
        # floor: without accumulation a smaller batch is the only way to fit, BatchNorm or not
        search = {**search_off(config), "precisions": amp_choices(("float16", "bfloat16")), "min_micro_batch": 1}
        probe = {"steps": max(3, len(scales(config, batch)))}  # every scale in the measured steps
        return kit_spec(self, path, self.checkout(path), options, det.probe_options(config) if detection else [], train,
                        search, probe=probe), warnings

    def stated(self, raw, path, options):
        """The batch (first_bs, else batch_size_per_card), AMP (tools/train.py's defaults: O2, float16) and
        Global.to_static; PaddleOCR does not accumulate."""
        config = apply_options(raw, options, self.value)
        level = get_key(config, "Global.amp_level", "O2") if get_key(config, "Global.use_amp") else "O0"
        return {"micro_batch": positive_batch(config, batch_key(config), path),
                "precision": stated_precision(level, get_key(config, "Global.amp_dtype", "float16")),
                "to_static": bool(get_key(config, STATIC_KEY))}

    def changes(self, raw, tuned, target):
        strategy, eval_batch = tuned.strategy, evaluated_batch(tuned)
        changes: dict[str, Any] = {batch_key(raw): strategy.micro_batch}
        if eval_batch is not None:
            changes[EVAL_BATCH] = eval_batch
        changes.update(compiled(tuned))
        level, dtype = paddle_amp(strategy)
        if level != "O0":
            changes.update({"Global.use_amp": True, "Global.amp_level": level, "Global.amp_dtype": dtype})
        elif get_key(raw, "Global.use_amp"):
            changes["Global.use_amp"] = False
        return changes, smaller_batch(LR_ADVICE, tuned, target)


KIT = PaddleOCR(name="paddleocr", package="ppocr", sections=("Global", "Architecture", "Train"), one_flag=True,
                accumulates=False, cpu_options=("Global.use_gpu=False",), title="PaddleOCR",
                output_option="Global.save_model_dir",
                data_keys=("Train.dataset.data_dir", "Train.dataset.label_file_list"))


def set_head_sizes(config: dict[str, Any], characters: int) -> None:
    """tools/train.py's sizing of the heads from the post-processing's character count (recognition, not
    distilled)."""
    head, post = config["Architecture"]["Head"], config["PostProcess"]["name"]
    if head["name"] != "MultiHead":
        head["out_channels"] = characters
    else:
        characters -= {"SARLabelDecode": 2, "NRTRLabelDecode": 3}.get(post, 0)
        channels = {"CTCLabelDecode": characters}
        second = config["Loss"]["loss_config_list"][1]
        if next(iter(second)) == "SARLoss":
            second["SARLoss"] = {**(second["SARLoss"] or {}), "ignore_index": characters + 1}
            channels["SARLabelDecode"] = characters + 2
        elif next(iter(second)) == "NRTRLoss":
            channels["NRTRLabelDecode"] = characters + 3
        head["out_channels_list"] = channels
    if post == "SARLabelDecode":
        config["Loss"]["ignore_index"] = characters - 1


def encoded_sample(config: dict[str, Any], characters: list[str]) -> dict[str, Any]:
    """The Train transforms' label encoding of the longest text they accept, from the dictionary's characters."""
    import numpy as np
    from ppocr.data import create_operators, transform

    encoders = [op for op in config["Train"]["dataset"]["transforms"] if next(iter(op)).endswith("Encode")]
    operators = create_operators(encoders, config["Global"])
    for length in range(int(config["Global"].get("max_text_length", 25)), 0, -1):
        text = "".join(characters[1:length + 1])
        data = transform({"label": text, "image": np.zeros((8, 8, 3), "uint8")}, operators)
        if data is not None:
            return data
    raise BuildError("Train.dataset.transforms: the label encoders accept no text from the dictionary")


class PaddleOCRSource(KitSource):
    name = "paddleocr"
    words: ClassVar[dict[str, str]] = {
        "train.target_batch": f"{FIRST_BS} (else {PER_CARD}; -O, or --target-batch)"}
    terms = terms_note("PaddleOCR", f"{FIRST_BS} (else {PER_CARD})", k="k (accumulation)")
    shapes_per_step = True  # a multi-scale sampler's scales take turns

    def build(self, settings, spec_dir, configure):
        import numpy as np
        import paddle

        from vramtune.sources.tensors import first_output

        os.chdir(settings.checkout)  # the configs' paths (character_dict_path) are relative to the checkout
        with kit_code("PaddleOCR", settings.checkout):
            from ppocr.losses import build_loss
            from ppocr.modeling.architectures import build_model
            from ppocr.postprocess import build_post_process

            with open(settings.config, encoding="utf-8") as stream:
                config = apply_options(yaml.safe_load(stream), settings.options, KIT.value)
            if det.is_detection(config):
                return det.build(config, settings.checkout)
            post_process = build_post_process(config["PostProcess"], config["Global"])
            characters = list(getattr(post_process, "character", []))
            set_head_sizes(config, len(characters))
            with eager_parameters():  # an RNN (SAR's and CRNN's LSTMs) cannot be built lazily
                model = build_model(config["Architecture"])
            train_loss = build_loss(config["Loss"])
            sample = encoded_sample(config, characters)
            average = ema(config, model)
            held = held_state(config, model)
        swaps = Swaps(model, average, kept_copies(config)) if average is not None else None
        keys = next((op["KeepKeys"]["keep_keys"] for op in config["Train"]["dataset"]["transforms"]
                     if "KeepKeys" in op), ["image", "label"])
        extra_input = config["Architecture"]["algorithm"] in EXTRA_INPUT
        height, width = eval_shape(config)

        def mapped(loader: str) -> bool:
            """On a CPU, a loader with workers and shared memory hands the loop batches in mapped files, which
            Paddle's host allocator never counts (paddle.io's worker.py): the probe makes its batches so too."""
            return (paddle.device.get_device().startswith("cpu") and int(get_key(config, f"{loader}.num_workers", 0)
                    or 0) > 0 and bool(get_key(config, f"{loader}.use_shared_memory", True)))

        shared = {True: mapped("Train.loader"), False: mapped("Eval.loader")}  # by model.training

        def tensors(size: int, image_height: int, image_width: int) -> list[Any]:
            from paddle.base import core

            arrays = []
            for key in keys:
                if key == "image":
                    arrays.append(np.random.randn(size, 3, image_height, image_width).astype("float32"))
                elif key == "valid_ratio":
                    arrays.append(np.ones([size], "float32"))
                elif key in sample:
                    arrays.append(np.stack([np.asarray(sample[key])] * size))
                else:
                    raise BuildError(f"Train KeepKeys: {key!r} cannot be synthesised")
            if not shared[model.training]:
                return [paddle.to_tensor(array) for array in arrays]
            batch = [core.eager.Tensor(core._array_to_share_memory_tensor(array), core.CPUPlace()) for array in arrays]
            core._cleanup_mmap_fds()  # their files unlinked now (mapped until freed): a probe leaves none behind
            return batch

        def make_batch(size: int) -> list[list[Any]]:
            if not model.training:  # an evaluation batch: the Eval transforms' shape, no training scales
                return [tensors(size, height, width), [size]]
            pairs = scales(config, size)
            return [tensors(bs, h or height, w or width) for w, h, bs in pairs] + [[size]]

        def upcoming(size: int, training: bool) -> list[Any]:
            """A batch a loader reads ahead: training, the largest scale's (the sampler's turns are random)."""
            if not training:
                return tensors(size, height, width)
            w, h, bs = max([((w or width), (h or height), bs) for w, h, bs in scales(config, size)],
                           key=lambda scale: scale[0] * scale[1] * scale[2])
            return tensors(bs, h, w)

        turn = [0]
        # what tools/program.py's loops keep of a step into the next: train()'s `preds` while the next forward runs
        # and through an evaluation, with Global.cal_metric_during_train its `batch` as numpy copies (made through
        # Paddle's host allocator) through an evaluation; eval()'s `preds` and `batch_numpy` while its next forward
        # runs. The sampler's scales come in random order, so any step's may be kept beside any forward: the probe
        # keeps the largest scale's
        last: dict[str, Any] = {}
        metric_copies = bool(config["Global"].get("cal_metric_during_train", False))

        def forward(network, data):
            return network(data[0], data=data[1:]) if extra_input else network(data[0])

        def outputs(value) -> list[Any]:
            if isinstance(value, dict):
                return [t for v in value.values() for t in outputs(v)]
            if isinstance(value, (list, tuple)):
                return [t for v in value for t in outputs(v)]
            return [value] if isinstance(value, paddle.Tensor) else []

        def keep_largest(name: str, value: Any) -> None:
            size = sum(int(t.numel()) * t.element_size() for t in outputs(value))
            if size >= last.get(f"{name} bytes", 0):
                last[name], last[f"{name} bytes"] = value, size

        def previous_eval_step(network, data, size: int) -> tuple[list[Any], list[Any]]:
            """An evaluation step's leftovers as eval() holds them into the next one: an output as large as its
            `preds` (float32: to_float32 under AMP; per-sample shapes from a one-sample forward, once) and the numpy
            copies of its batch."""
            if "per sample" not in last:
                last["per sample"] = [(list(t.shape[1:]), "float32" if t.is_floating_point() else t.dtype)
                                      for t in outputs(forward(network, [t[:1] for t in data]))]
            return ([paddle.empty([size, *shape], dtype) for shape, dtype in last["per sample"]],
                    [t.numpy() for t in data])

        def loss(network, batch):
            *per_scale, (size,) = batch
            if not network.training:  # evaluation: the Eval shape, forward only (the kit decodes on the host)
                if swaps:  # the EMA's weights, the training ones copied aside meanwhile
                    swaps.evaluate()
                data = per_scale[0]
                previous = previous_eval_step(network, data, size)  # noqa: F841  alive through the forward
                return first_output(forward(network, data)).mean()
            if swaps:  # training again: the training weights back, as tools/program.py restores them
                swaps.train()
            last.pop("numpy", None)  # the loop's `batch` is the next one now
            data = per_scale[turn[0] % len(per_scale)]
            turn[0] += 1
            preds = forward(network, data)
            keep_largest("preds", preds)  # the previous step's freed only now, as `preds = model(images)` does
            keep_largest("data", data)
            return train_loss(preds, data)["loss"]

        def after_step():
            if swaps:
                swaps.after_step()
            if metric_copies and "data" in last:  # `batch = [item.numpy() for item in batch]` after the step
                last["numpy"] = [t.numpy() for t in last["data"]]

        return ReadAhead(make_batch, loss, model, kit_read_ahead(config, "Train.loader"),
                         kit_read_ahead(config, "Eval.loader"), upcoming).built(after_step, held)


SOURCE = PaddleOCRSource()
