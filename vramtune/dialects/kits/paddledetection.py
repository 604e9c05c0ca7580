"""PaddleDetection training configs (`python tools/train.py -c configs/...yml -o key=value ...`).

The config is read by the kit's own loader: `ppdet.core.workspace`'s `load_config` (the `_BASE_` files merged under
the config) and the `-o` overrides as `ppdet.utils.cli.ArgsParser` parses them and tools/train.py merges them
(`merge_config`). The parent never imports Paddle, and `ppdet` does on import, so the parent runs those functions'
own source from the user's checkout (they need only yaml); the child uses `ppdet.core.workspace` itself.

The batch is `TrainReader.batch_size` (per card). PaddleDetection's trainer neither accumulates gradients nor
recomputes, and its AMP is tools/train.py's `--amp` flag, which the file cannot carry: the search is the batch alone,
in fp32, and the warnings say so. Its EMA (`use_ema`, a config key) is measured: the probe keeps the kit's own
`ModelEMA` and updates it after every step, as the trainer does.

The probe builds what the trainer builds, with the kit's own code: `create(cfg.architecture)`, and trains on random
images at the largest training size (`TrainReader.batch_transforms`' `BatchRandomResize`, the largest of its sizes,
or a fixed-size `Resize`) with random ground-truth boxes, padded as `PadGT` pads them, at epoch 0, with the batches
its DataLoader holds ahead (`worker_num`, `TrainReader.use_shared_memory`: kits/loader.py). One family's
inputs are made in this version: PP-YOLOE / PP-YOLOE+ (`architecture: YOLOv3` with a `PPYOLOEHead`); every other
is refused by name."""
from __future__ import annotations

import ast
import functools
import types
from pathlib import Path
from typing import Any, ClassVar

import yaml

from vramtune.dialects import yaml_file as tags
from vramtune.dialects.kits.codec import DETECTION_STATIC_KEY
from vramtune.dialects.kits.config import Kit, KitEMA, KitError, KitSource, eager_parameters, get_key
from vramtune.dialects.kits.loader import ReadAhead, read_ahead
from vramtune.dialects.kits.source import kit_code, terms_note
from vramtune.dialects.kits.spec import base_advice, batch_only_spec, positive_batch, smaller_batch

BATCH = "TrainReader.batch_size"
LOADER = "ppdet/core/workspace.py"
LOADER_NODES = ("AttrDict", "BASE_KEY", "global_config", "_load_config_with_base", "load_config", "dict_merge",
                "merge_config")
PARSER = ("ppdet/utils/cli.py", "_parse_opt")  # ArgsParser._parse_opt: tools/train.py's -o, as a dict to merge
BOXES = 20  # ground-truth boxes per image in the probe's batches (PadGT pads every image to the batch's most)
# the kit's OptimizerBuilder.optimizer.type -> vramtune's (the same state per weight)
OPTIMIZERS = {"momentum": "momentum", "sgd": "sgd", "adam": "adam", "adamw": "adamw"}
FAMILIES = "PP-YOLOE / PP-YOLOE+ (architecture: YOLOv3 with yolo_head: PPYOLOEHead)"
NO_ACCUMULATION = ("PaddleDetection's trainer cannot accumulate gradients: the batch per card falls from {target} to "
                   "{batch}. Its configs set LearningRate.base_lr for their total batch: scale it with the batch "
                   "(linear scaling: x{ratio:.3g} here)")
FLAGS_ONLY = ("AMP is a flag of tools/train.py in PaddleDetection, not a config key: searched in fp32 only (the "
              "tuned file cannot carry it; `vramtune measure CONFIG` measures one batch under AMP); --eval (a flag "
              "too) is not measured")


def _nodes(path: Path, names: tuple[str, ...]) -> list[ast.stmt]:
    """The module's top-level definitions and assignments of these names, and the methods of these names."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError) as error:
        raise KitError(f"PaddleDetection's config loader {path} cannot be read: {error}") from None
    found: list[ast.stmt] = []
    for node in ast.walk(tree):
        assigned = [target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
        if getattr(node, "name", None) in names or (node in tree.body and set(assigned) & set(names)):
            found.append(node)
    if len(found) != len(names):
        raise KitError(f"{path}: this PaddleDetection's config loader has no {', '.join(names)}: a version vramtune "
                       "does not know")
    return found


@functools.cache
def kit_loader(checkout: str) -> Any:
    """The kit's own loader functions, compiled from its source without its imports (ppdet imports Paddle)."""
    nodes = [*_nodes(Path(checkout) / LOADER, LOADER_NODES), *_nodes(Path(checkout) / PARSER[0], PARSER[1:])]
    return compile(ast.Module(body=nodes, type_ignores=[]), f"{checkout}/{LOADER}", "exec")


def read_config(checkout: Path | str, path: Path, options: list[str]) -> dict[str, Any]:
    """The config as tools/train.py reads it: `load_config` (its `_BASE_` files merged), then the `-o` overrides
    merged (`merge_config(ArgsParser._parse_opt(opts))`). A fresh namespace each time: the loader merges into its
    module's global config."""
    import collections.abc
    import os

    kit_yaml = types.SimpleNamespace(load=yaml.load, Loader=tags.TaggedLoader)  # its yaml.Loader, tags as mappings
    namespace: dict[str, Any] = {"os": os, "yaml": kit_yaml, "collectionsAbc": collections.abc,
                                 "__name__": "ppdet_config_loader"}
    exec(kit_loader(str(checkout)), namespace)
    try:
        config = namespace["load_config"](str(path))
        if options:
            namespace["merge_config"](namespace["_parse_opt"](None, list(options)))
    except (OSError, TypeError, AttributeError, ValueError, KeyError, yaml.YAMLError) as error:
        raise KitError(f"{path}: PaddleDetection's loader cannot read it: {error}") from None
    return dict(config)


def train_size(config: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of the training batches at their largest: BatchRandomResize's largest size, else the last
    fixed-size Resize of TrainReader's transforms."""
    size = None
    for key in ("sample_transforms", "batch_transforms"):
        for transform in get_key(config, f"TrainReader.{key}", []) or []:
            if not isinstance(transform, dict) or len(transform) != 1:
                continue
            [(kind, arguments)] = transform.items()
            arguments = arguments or {}
            if kind == "BatchRandomResize" and not arguments.get("keep_ratio", True):
                sizes = arguments.get("target_size")
                sizes = sizes if isinstance(sizes, list) else [sizes]
                sides = [side if isinstance(side, (list, tuple)) else (side, side) for side in sizes]
                size = max(sides, key=lambda side: side[0] * side[1], default=None)
            elif kind == "Resize" and not arguments.get("keep_ratio", True):
                size = arguments.get("target_size")
                size = size if isinstance(size, (list, tuple)) else (size, size)
    if size is None or len(size) != 2 or not all(isinstance(side, int) and side > 0 for side in size):
        raise KitError("TrainReader: no fixed-size resize (BatchRandomResize or Resize with keep_ratio: false) in "
                       "its transforms, so the training images' size is the dataset's: a probe needs one (-O "
                       "\"TrainReader.batch_transforms=[{BatchRandomResize: {target_size: [320], keep_ratio: "
                       "false}}, {NormalizeImage: {}}, {Permute: {}}, {PadGT: {}}]\")")
    return int(size[0]), int(size[1])


def family_of(config: dict[str, Any]) -> str | None:
    """The family whose inputs the probe makes, None for another."""
    architecture = config.get("architecture")
    head = get_key(config, f"{architecture}.yolo_head") if isinstance(architecture, str) else None
    return "ppyoloe" if architecture == "YOLOv3" and head == "PPYOLOEHead" else None


def optimizer_of(config: dict[str, Any]) -> str | None:
    kind = str(get_key(config, "OptimizerBuilder.optimizer.type", "Momentum")).lower()
    return OPTIMIZERS.get(kind)


class PaddleDetection(Kit):
    def value(self, text):
        """A -o value as ppdet's ArgsParser reads it: YAML."""
        return yaml.safe_load(text)

    def option_text(self, value):
        return value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()

    def recognises(self, raw):
        """`_BASE_` (inheritance) or `architecture` at the top (vramtune's own specs and the other kits' have
        neither; PaddleSeg's inheritance is `_base_`)."""
        return isinstance(raw, dict) and ("_BASE_" in raw or "architecture" in raw)

    def spec(self, raw, path, options):
        checkout = self.checkout(path)
        config = read_config(checkout, path, options)
        batch = positive_batch(config, BATCH, path)
        if not isinstance(config.get("architecture"), str):
            raise KitError(f"{path}: no architecture (after its _BASE_ files)")
        if family_of(config) is None:
            raise KitError(f"{path}: architecture {config['architecture']}: the probe makes the training inputs of "
                           f"{FAMILIES} only in this version")
        if config.get(DETECTION_STATIC_KEY):  # the trainer compiles the model
            raise KitError(f"{path}: {DETECTION_STATIC_KEY}: True: probes train eager (-O {DETECTION_STATIC_KEY}=False "
                           "measures that)")
        height, width = train_size(config)
        optimizer = optimizer_of(config)
        warnings = [f"{path}: {FLAGS_ONLY}",
                    f"{path}: the dataset is never read: probes train on random {width}x{height} images (the largest "
                    f"training size) with {BOXES} random boxes each, at epoch 0 (PP-YOLOE's static assigner)"]
        dropped = [f"{key}.pretrained" for key, value in config.items()
                   if isinstance(value, dict) and isinstance(value.get("pretrained"), str)]  # a backbone's own URL
        if config.get("pretrain_weights") or dropped:
            said = ", ".join(["pretrain_weights"] * bool(config.get("pretrain_weights")) + dropped)
            warnings.append(f"{path}: {said}: not downloaded (probes build random weights: the same bytes)")
        if optimizer is None:
            warnings.append(f"{path}: OptimizerBuilder.optimizer.type "
                            f"{get_key(config, 'OptimizerBuilder.optimizer.type')}: measured with AdamW's state")
        # BatchNorm everywhere and no accumulation: batch 1 normalises one image per channel
        return batch_only_spec(self, path, checkout, options, [f"{key}=null" for key in dropped], batch,
                               optimizer), warnings

    def stated(self, raw, path, options):
        """The batch alone: AMP is a flag of tools/train.py, and the trainer neither accumulates nor compiles."""
        return {"micro_batch": positive_batch(read_config(self.checkout(path), path, options), BATCH, path)}

    def changes(self, raw, tuned):
        batch = tuned.strategy.micro_batch
        warnings = [*smaller_batch(NO_ACCUMULATION, tuned), *base_advice(raw, "_BASE_")]
        # ppdet merges the file over its _BASE_ files key by key: a file without TrainReader gets one holding the batch
        has_reader = isinstance(raw, dict) and isinstance(raw.get("TrainReader"), dict)
        return ({BATCH: batch} if has_reader else {"TrainReader": {"batch_size": batch}}), warnings


KIT = PaddleDetection(name="paddledetection", package="ppdet", sections=("architecture",), one_flag=True,
                      accumulates=False)


class PaddleDetectionSource(KitSource):
    name = "paddledetection"
    words: ClassVar[dict[str, str]] = {"train.target_batch": f"{BATCH} (-O, or --target-batch)"}
    terms = terms_note("PaddleDetection", BATCH, who="its trainer")

    def build(self, settings, spec_dir, configure):
        import paddle

        with kit_code("PaddleDetection", settings.checkout):
            from ppdet.core import workspace
            from ppdet.optimizer import ModelEMA
            from ppdet.utils.cli import ArgsParser

            config = workspace.load_config(settings.config)
            workspace.merge_config(ArgsParser()._parse_opt([*settings.options, *settings.probe_options]))  # as -o
            with eager_parameters():  # ppdet fills them in place (set_value in PPYOLOEHead._init_weights)
                model = workspace.create(config.architecture)
        height, width = train_size(config)
        classes = int(config.get("num_classes", 80))

        def make_batch(batch: int) -> dict[str, Any]:
            corners = paddle.rand([batch, BOXES, 2]) * paddle.to_tensor([width / 2, height / 2])
            sides = paddle.rand([batch, BOXES, 2]) * paddle.to_tensor([width / 2, height / 2]) + 4
            return {"image": paddle.randn([batch, 3, height, width]),
                    "im_shape": paddle.to_tensor([[height, width]] * batch, "float32"),
                    "scale_factor": paddle.ones([batch, 2]),
                    "gt_class": paddle.randint(0, classes, [batch, BOXES, 1], "int32"),
                    "gt_bbox": paddle.concat([corners, corners + sides], axis=-1),
                    "pad_gt_mask": paddle.ones([batch, BOXES, 1])}

        def loss(network, batch):
            return network({**batch, "epoch_id": 0})["loss"]  # the trainer's step; a fresh dict: the model keeps it

        # the kit's TrainReader: cfg.worker_num workers, TrainReader.use_shared_memory (BaseDataLoader's default off)
        workers, shared = int(config.get("worker_num", 0) or 0), bool(get_key(config, "TrainReader.use_shared_memory"))
        ahead = read_ahead(workers, shared, paddle.device.get_device().startswith("cpu"))
        average = None
        if config.get("use_ema"):
            average = KitEMA(lambda: ModelEMA(model, decay=config.get("ema_decay", 0.9998),
                                              ema_decay_type=config.get("ema_decay_type", "threshold"),
                                              cycle_epoch=config.get("cycle_epoch", -1),
                                              ema_black_list=config.get("ema_black_list"),
                                              ema_filter_no_grad=config.get("ema_filter_no_grad", False)),
                             lambda ema: ema.update())
        return ReadAhead(make_batch, loss, model, ahead).built(average)


SOURCE = PaddleDetectionSource()
