"""PaddleClas training configs (`python tools/train.py -c ppcls/configs/...yaml -o Key=value`).

The target batch is the config's own: DataLoader.Train.sampler.batch_size x Global.update_freq (per card).
Strategies the kit has: the per-card batch with update_freq keeping the target (PaddleClas accumulates), AMP
(`AMP.use_amp`, `AMP.level`; an AMP section without use_amp means on), `Global.to_static`; evaluation
(`Global.eval_during_train`) at DataLoader.Eval.sampler.batch_size, tuned too. PaddleClas has no recompute.

The probe builds the kit's own model (`ppcls.arch.build_model`) and loss (`ppcls.loss.build_loss`) from the
config through the kit's own loader (`ppcls.utils.config.get_config`, the -o overrides applied), and trains them
in vramtune's loop, which steps as `ppcls/engine/train/train.py` does (forward, the loss dict's `loss` / update_freq,
backward, the optimizer every update_freq steps, clear_grad). Not through `ppcls.engine.Engine`: it builds the
dataloaders (the user's dataset files) in its constructor and trains whole epochs; what it adds to memory beside
model, loss and optimizer is only EMA (`EMA:`, the kit's ExponentialMovingAverage: a copy of the weights,
updated after every optimizer step as train.py does), which the probe runs too."""
from __future__ import annotations

from typing import Any, ClassVar

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
from vramtune.dialects.kits.config import Kit, KitEMA, KitError, KitSource, apply_options, get_key
from vramtune.dialects.kits.loader import ReadAhead, kit_read_ahead
from vramtune.dialects.kits.source import kit_code, terms_note
from vramtune.dialects.kits.spec import kit_spec, positive_batch

TRAIN_BATCH, EVAL_BATCH, UPDATE_FREQ = ("DataLoader.Train.sampler.batch_size", "DataLoader.Eval.sampler.batch_size",
                                        "Global.update_freq")
# the kit's optimizer names -> vramtune's (the state each keeps per parameter is the same)
OPTIMIZERS = {"momentum": "momentum", "adamw": "adamw", "adam": "adam", "sgd": "sgd"}
CROPS = ("RandCropImage", "RandCropImageV2", "RandomResizedCrop", "CropImage", "ResizeImage")


def image_size(config: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of a training image: the train transforms' crop, else Global.image_shape."""
    for op in get_key(config, "DataLoader.Train.dataset.transform_ops", []) or []:
        name, params = next(iter(op.items())) if isinstance(op, dict) and op else (None, None)
        size = (params or {}).get("size") if name in CROPS else None
        if isinstance(size, int):
            return size, size
        if isinstance(size, (list, tuple)) and len(size) == 2:
            return int(size[1]), int(size[0])  # the kit's crops take (width, height)
    shape = get_key(config, "Global.image_shape", [3, 224, 224])
    return int(shape[1]), int(shape[2])


def pretrained_keys(node: Any, path: str) -> list[str]:
    """The dotted keys under `path` whose `pretrained` is set (True or a weights file), list indices included."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    keys = []
    for key, value in items:
        if key == "pretrained" and value:
            keys.append(f"{path}.{key}")
        keys += pretrained_keys(value, f"{path}.{key}")
    return keys


def amp_on(config: dict[str, Any]) -> bool:
    section = config.get("AMP")
    return bool(section) and bool(section.get("use_amp", True))


def amp_level(config: dict[str, Any]) -> str:
    """Paddle's AMP level the kit trains at: O0 (off), or AMP.level, O1 unless O2 (ppcls/engine/engine.py sets O1
    for any other)."""
    return "O0" if not amp_on(config) else "O2" if config["AMP"].get("level", "O1") == "O2" else "O1"


class PaddleClas(Kit):
    def spec(self, raw, path, options):
        config = apply_options(raw, options)
        batch = positive_batch(config, TRAIN_BATCH, path)
        update_freq = get_key(config, UPDATE_FREQ, 1) or 1
        if get_key(config, "Global.use_dali"):
            raise KitError(f"{path}: Global.use_dali: DALI decodes and augments on the card, which the probe does not "
                           "measure (probe with -O Global.use_dali=False; it leaves the model's memory as it is)")
        if get_key(config, "Global.eval_during_train") and get_key(config, "Global.eval_mode") == "retrieval":
            raise KitError(f"{path}: Global.eval_mode retrieval: it evaluates with every query and gallery feature "
                           "kept (as many as the dataset has), which the probe does not measure (probe with -O "
                           "Global.eval_during_train=False)")
        if isinstance(config.get("Optimizer"), list):
            raise KitError(f"{path}: Optimizer: a list of optimizers (one per part of the model) is not measured in "
                           "this version")
        optimizer = str(get_key(config, "Optimizer.name", "Momentum")).lower()
        warnings = []
        if optimizer not in OPTIMIZERS:
            warnings.append(f"{path}: Optimizer.name {optimizer}: measured with AdamW's state (8 bytes per weight)")
        train = {"target_batch": batch * update_freq, "optimizer": OPTIMIZERS.get(optimizer, "adamw"),
                 "learning_rate": 0.001}
        if get_key(config, "Global.eval_during_train", False):
            train.update(eval_phase(get_key(config, EVAL_BATCH, batch)))
        # the kit's AMP has no dtype key: Paddle's default, float16
        search = {**search_off(config), "precisions": amp_choices(("float16",))}
        return kit_spec(self, path, self.checkout(path), options, self._probe_options(config), train, search), warnings

    def stated(self, raw, path, options):
        """The batch per card, update_freq, AMP (float16: the kit has no dtype key) and Global.to_static."""
        config = apply_options(raw, options)
        return {"micro_batch": positive_batch(config, TRAIN_BATCH, path),
                "accumulation": get_key(config, UPDATE_FREQ, 1) or 1,
                "precision": stated_precision(amp_level(config), "float16"),
                "to_static": bool(get_key(config, STATIC_KEY))}

    @staticmethod
    def _probe_options(config: dict[str, Any]) -> list[str]:
        """What the probe sets besides the user's overrides: no pretrained weights anywhere in the model (Arch's,
        a RecModel's Backbone's, each distilled model's): they change no byte and are never downloaded."""
        return [f"{key}=False" for key in pretrained_keys(config.get("Arch"), "Arch")]

    def changes(self, raw, tuned):
        strategy, eval_batch = tuned.strategy, evaluated_batch(tuned)
        changes: dict[str, Any] = {TRAIN_BATCH: strategy.micro_batch, **compiled(tuned)}
        if strategy.accumulation > 1 or get_key(raw, UPDATE_FREQ) is not None:
            changes[UPDATE_FREQ] = strategy.accumulation
        if eval_batch is not None:
            changes[EVAL_BATCH] = eval_batch
        level, _ = paddle_amp(strategy)
        if level != "O0":
            section = {"use_amp": True, "level": level}
            if eval_batch is not None:  # evaluated under AMP, as measured (the kit's default: fp32)
                section["use_fp16_test"] = True
            if isinstance(raw.get("AMP"), dict):
                changes.update({f"AMP.{key}": value for key, value in section.items()})
            else:  # no AMP section yet: the whole section, as the kit's configs write it
                changes["AMP"] = {"scale_loss": 128.0, "use_dynamic_loss_scaling": True, **section}
        elif amp_on(raw):
            changes["AMP.use_amp"] = False
        return changes, []


KIT = PaddleClas(name="paddleclas", package="ppcls", sections=("Arch", "DataLoader"))


class PaddleClasSource(KitSource):
    name = "paddleclas"
    words: ClassVar[dict[str, str]] = {
        "train.target_batch": f"{TRAIN_BATCH} x {UPDATE_FREQ} (-O, or --target-batch)"}
    terms = terms_note("PaddleClas", TRAIN_BATCH, UPDATE_FREQ)

    def build(self, settings, spec_dir, configure):
        import paddle

        with kit_code("PaddleClas", settings.checkout):
            from ppcls.arch import build_model
            from ppcls.loss import build_loss
            from ppcls.utils import config as kit_config
            from ppcls.utils import logger

            logger.init_logger()
            config = kit_config.get_config(settings.config, overrides=[*settings.options, *settings.probe_options],
                                           show=False)
            model = build_model(config)
            train_loss = build_loss(config["Loss"]["Train"])
            after_step = ema(config, model)
        height, width = image_size(config)
        classes = int(get_key(config, "Arch.class_num", None) or get_key(config, "Arch.Head.class_num", 1000))
        with_labels = "Head" in config["Arch"] or config["Arch"].get("is_rec", False)  # the engine's is_rec

        def make_batch(batch: int):
            return paddle.randn([batch, 3, height, width]), paddle.randint(0, classes, [batch, 1])

        def loss(network, batch):
            images, labels = batch
            return train_loss(network(images, labels) if with_labels else network(images), labels)["loss"]

        return ReadAhead(make_batch, loss, model, kit_read_ahead(config, "DataLoader.Train.loader"),
                         kit_read_ahead(config, "DataLoader.Eval.loader")).built(after_step)


def ema(config: dict[str, Any], model: Any) -> Any:
    """The kit's EMA where the config has `EMA:` (ppcls/engine/engine.py makes it after AMP, train.py updates it
    after each optimizer step), else None."""
    if "EMA" not in config:
        return None
    from ppcls.utils.ema import ExponentialMovingAverage

    decay = (config["EMA"] or {}).get("decay", 0.9999)
    return KitEMA(lambda: ExponentialMovingAverage(model, decay), lambda average: average.update(model))


SOURCE = PaddleClasSource()

