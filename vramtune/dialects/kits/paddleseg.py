"""PaddleSeg training configs (`python tools/train.py --config configs/...yml --opts key=value ...`).

The config is read by the kit's own loader: `paddleseg.cvlibs.config`'s `parse_from_yaml` (the `_base_` files merged
under the config) and `update_config_dict` (the `--opts` overrides). The parent never imports Paddle, and that
module does, so the parent runs those functions' own source from the user's checkout (they need only yaml); the
child builds through `Config` and `SegBuilder` themselves.

The batch is `batch_size` (per card; `iters` is left alone), the one memory key a PaddleSeg config carries: the
kit neither accumulates gradients nor recomputes (a smaller batch is a smaller effective batch), and its AMP is
tools/train.py's flags (`--precision fp16 --amp_level O1|O2`), which the file cannot carry: the search is the
batch alone, in fp32, and the warnings say so. `to_static_training: True` is refused by name (the probe trains
eager). Evaluation (`--do_eval`, a flag too) runs at batch 1 on whole validation images, whose size is the
dataset's: not measured, said.

The probe builds what tools/train.py builds, with the kit's own code: `Config` (the overrides, no pretrained
weights), `SegBuilder(config).model` (through `utils.convert_sync_batchnorm`, as tools/train.py does) and
`.loss`, and computes the loss as `paddleseg.core.train` does (the model's own `loss_computation` where it has one,
else the kit's `loss_computation`, summed). The dataset is never read: random images at the train crop (the last
fixed-size transform of `train_dataset.transforms`) and random labels over the classes, which give every training
step its shape since the crop does."""
from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from vramtune.core.errors import BuildError
from vramtune.dialects.kits.config import Kit, KitError, KitSource, get_key
from vramtune.dialects.kits.loader import ReadAhead, read_ahead
from vramtune.dialects.kits.source import kit_code, terms_note
from vramtune.dialects.kits.spec import base_advice, batch_only_spec, positive_batch, smaller_batch

BATCH = "batch_size"
LOADER = "paddleseg/cvlibs/config.py"
LOADER_FUNCTIONS = ("parse_from_yaml", "merge_config_dicts", "update_config_dict")
# the kit's optimizer types -> vramtune's (the same state per weight); SGD with momentum is Momentum in the kit too
OPTIMIZERS = {"sgd": "sgd", "momentum": "momentum", "adam": "adam", "adamw": "adamw", "adamwdl": "adamw",
              "adamwdl_cae": "adamw"}  # AdamWDL: AdamW with layer-wise learning rates, the same state
# transforms that give every image the same size (their size key, its default, as paddleseg/transforms takes them:
# (width, height)) and the ones after which the size varies again
FIXED_SIZE = {"RandomPaddingCrop": ("crop_size", (512, 512)), "Resize": ("target_size", (512, 512)),
              "Padding": ("target_size", None), "ScalePadding": ("target_size", (512, 512)),
              "RandomAffine": ("size", (224, 224))}
VARIABLE_SIZE = ("ResizeStepScaling", "ResizeRangeScaling", "ResizeByShort", "ResizeByLong", "LimitLong",
                 "RandomCenterCrop", "PaddingByAspectRatio")  # RandomScaleAspect resizes back to the size it got
TARGETS = {"AddEdgeLabel": "edge labels (GSCNN, DecoupledSegNet, PIDNet)",
           "GenerateInstanceTargets": "instance targets (MaskFormer)",
           "AddMultiLabelAuxiliaryCategory": "multi-label targets (multilabelseg)"}
LR_ADVICE = ("PaddleSeg cannot accumulate gradients: the batch per card falls from {target} to {batch}. Its configs "
             "set lr_scheduler.learning_rate for their total batch (`batch_size: 4  # total: 4*4`): scale it with the "
             "batch (linear scaling: x{ratio:.3g} here)")
FLAGS_ONLY = ("AMP is set by tools/train.py's flags in PaddleSeg, not by a config key: searched in fp32 only (the "
              "tuned file cannot carry it; `vramtune measure CONFIG` measures one batch under AMP); "
              "--use_ema (a copy of the weights) and --do_eval (batch 1 on whole validation images) are flags too: "
              "not measured")


@functools.cache
def kit_loader(checkout: str) -> dict[str, Any]:
    """The kit's own config functions, compiled from its source without its imports (they import Paddle)."""
    path = Path(checkout) / LOADER
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError) as error:
        raise KitError(f"PaddleSeg's config loader {path} cannot be read: {error}") from None
    wanted = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in LOADER_FUNCTIONS]
    constants = [node for node in tree.body if isinstance(node, ast.Assign) and all(
        isinstance(target, ast.Name) and target.id.startswith("_") and target.id.endswith("_KEY")
        for target in node.targets)]
    if len(wanted) != len(LOADER_FUNCTIONS):
        raise KitError(f"{path}: this PaddleSeg's config loader has no {', '.join(LOADER_FUNCTIONS)}: a version "
                       "vramtune does not know")
    import codecs
    import os
    import typing
    from ast import literal_eval

    import yaml

    try:
        import six  # the loader's own import (PaddleSeg gets it through visualdl)
    except ImportError:
        raise KitError(f"PaddleSeg's config loader {path} imports six, which is not installed: pip install six (or "
                       f"pip install -r {checkout}/requirements.txt, whose visualdl brings it)") from None

    namespace: dict[str, Any] = {"codecs": codecs, "os": os, "yaml": yaml, "six": six, "literal_eval": literal_eval,
                                 **{name: getattr(typing, name) for name in ("Any", "Dict", "List", "Optional")},
                                 "__name__": "paddleseg_config_loader"}
    exec(compile(ast.Module(body=[*constants, *wanted], type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def read_config(checkout: Path | str, path: Path, options: list[str]) -> dict[str, Any]:
    """The config as the kit reads it: its `_base_` files merged, the `--opts` overrides applied."""
    loader = kit_loader(str(checkout))
    try:
        config = loader["parse_from_yaml"](str(path))
        return loader["update_config_dict"](config, opts=list(options) or None)
    except AssertionError as error:  # the kit's own checks of --opts (key=value, keys that exist)
        raise KitError(f"{path}: {error}") from None
    except (OSError, TypeError, AttributeError, ValueError) as error:
        raise KitError(f"{path}: PaddleSeg's loader cannot read it: {error}") from None


def crop(config: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of every training image: the last fixed-size transform of train_dataset.transforms."""
    size = None
    for transform in get_key(config, "train_dataset.transforms", []) or []:
        kind = transform.get("type") if isinstance(transform, dict) else None
        if kind in FIXED_SIZE:
            key, default = FIXED_SIZE[kind]
            size = transform.get(key, default)
            if kind == "Resize" and transform.get("keep_ratio"):
                size = None
        elif kind in VARIABLE_SIZE:
            size = None
    if isinstance(size, int):
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(side, int) for side in size):
        return int(size[1]), int(size[0])
    raise KitError("train_dataset.transforms: no fixed-size crop or resize (RandomPaddingCrop crop_size, Resize "
                   "target_size, ...) ends them, so the training images' size is the dataset's: a probe needs one "
                   "(the kit's --opts replace a list whole: -O \"train_dataset.transforms=[{'type': "
                   "'RandomPaddingCrop', 'crop_size': [512, 512]}, {'type': 'Normalize'}]\")")


def pretrained_keys(node: Any, prefix: str = "model") -> list[str]:
    """Every `pretrained` key with a value under the model config (URLs the kit would download)."""
    if not isinstance(node, dict):
        return []
    found = [f"{prefix}.pretrained"] if node.get("pretrained") else []
    for key, value in node.items():
        found += pretrained_keys(value, f"{prefix}.{key}")
    return found


def optimizer_of(config: dict[str, Any]) -> str | None:
    """vramtune's optimizer with the kit's optimizer's state, None for one it does not know."""
    optimizer = get_key(config, "optimizer", {}) or {}
    kind = str(optimizer.get("type", "sgd")).lower()
    if kind == "sgd" and "momentum" in optimizer:
        kind = "momentum"
    return OPTIMIZERS.get(kind)


class PaddleSeg(Kit):
    def recognises(self, raw):
        """`_base_` (inheritance) or `train_dataset` at the top (vramtune's own specs have neither)."""
        return isinstance(raw, dict) and ("_base_" in raw or "train_dataset" in raw)

    def spec(self, raw, path, options):
        checkout = self.checkout(path)
        config = read_config(checkout, path, options)
        batch = positive_batch(config, BATCH, path)
        if not isinstance(config.get("model"), dict):
            raise KitError(f"{path}: no model (after its _base_ files)")
        kinds = [t.get("type") for t in get_key(config, "train_dataset.transforms", []) or [] if isinstance(t, dict)]
        targets = [TARGETS[kind] for kind in kinds if kind in TARGETS]
        if get_key(config, "train_dataset.edge"):
            targets.append(TARGETS["AddEdgeLabel"])
        if targets:
            raise KitError(f"{path}: train_dataset makes {targets[0]}: not synthesised in this version (the probe "
                           "makes images and class labels)")
        if config.get("to_static_training"):
            raise KitError(f"{path}: to_static_training: True: probes train eager, as tools/train.py does without it "
                           "(-O to_static_training=False measures that)")
        height, width = crop(config)
        optimizer = optimizer_of(config)
        dropped = pretrained_keys(config["model"])
        warnings = [f"{path}: {FLAGS_ONLY}", f"{path}: the dataset is never read: probes train on random "
                                                 f"{width}x{height} images (the train crop) and random labels"]
        if dropped:
            warnings.append(f"{path}: {', '.join(dropped)}: not downloaded (probes build random weights: the same "
                            "bytes)")
        if optimizer is None:
            warnings.append(f"{path}: optimizer.type {get_key(config, 'optimizer.type')}: measured with AdamW's state "
                            "(8 bytes per weight)")
        # a batch of 1 normalises one value per channel in the pooled branches (PP-LiteSeg's SPPM, ...)
        return batch_only_spec(self, path, checkout, options, [f"{key}=None" for key in dropped], batch,
                               optimizer), warnings

    def stated(self, raw, path, options):
        """The batch alone: AMP is a flag of tools/train.py, and the kit neither accumulates nor compiles."""
        return {"micro_batch": positive_batch(read_config(self.checkout(path), path, options), BATCH, path)}

    def changes(self, raw, tuned):
        return {BATCH: tuned.strategy.micro_batch}, [*smaller_batch(LR_ADVICE, tuned), *base_advice(raw, "_base_")]


KIT = PaddleSeg(name="paddleseg", package="paddleseg", sections=("model",), one_flag=True, accumulates=False,
                config_flag="--config", option_flag="--opts")


def seg_batch(config: dict[str, Any], dataset_class: Any) -> tuple[int, int, int, int]:
    """(channels, height, width, classes) of the training batches the config's dataset would give."""
    from paddleseg.utils import utils

    dataset = config.get("train_dataset", {})
    channels = (utils.get_in_channels(config["model"]) or dataset.get("img_channels")
                or getattr(dataset_class, "IMG_CHANNELS", 3))
    classes = (config["model"].get("num_classes") or dataset.get("num_classes")
               or getattr(dataset_class, "NUM_CLASSES", None))
    if not classes:
        raise BuildError("model.num_classes: not set, nor by the train_dataset")
    return int(channels), *crop(config), int(classes)


class PaddleSegSource(KitSource):
    name = "paddleseg"
    terms = terms_note("PaddleSeg", BATCH)

    def build(self, settings, spec_dir, configure):
        import paddle

        with kit_code("PaddleSeg", settings.checkout):
            from paddleseg.core.train import loss_computation
            from paddleseg.cvlibs import Config, SegBuilder
            from paddleseg.utils import utils

            config = Config(settings.config, opts=[*settings.options, *settings.probe_options] or None)
            builder = SegBuilder(config)
            model = utils.convert_sync_batchnorm(builder.model, paddle.device.get_device().split(":")[0])
            losses = builder.loss
            channels, height, width, classes = seg_batch(config.dic, builder.train_dataset_class)

        def one(batch: int) -> tuple[Any, Any]:
            """A batch as the kit's loader gives it: float32 images, the labels as the PNG decodes them (uint8)."""
            labels = paddle.randint(0, classes, [batch, height, width], "int32").astype("uint8")
            return paddle.randn([batch, channels, height, width]), labels

        def loss(network, batch):
            images, decoded = batch
            labels = decoded.astype("int64")  # as paddleseg/core/train.py does, beside the decoded ones
            logits_list = network(images)
            if hasattr(network, "loss_computation"):
                loss_list = network.loss_computation(logits_list, losses, {"img": images, "label": labels})
            else:
                loss_list = loss_computation(logits_list=logits_list, labels=labels, edges=None, losses=losses)
            return sum(loss_list)

        # tools/train.py's --num_workers (default 0; a flag, not in the file): the loader's thread reads ahead
        return ReadAhead(one, loss, model, read_ahead(0, False, paddle.device.get_device().startswith("cpu"))).built()


SOURCE = PaddleSegSource()
