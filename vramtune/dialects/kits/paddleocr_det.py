"""PaddleOCR text detection configs (`Architecture.model_type: det`): DB (PP-OCRv3/v4/v5/v6 det, det_mv3_db,
det_res18_db, ...), DB++, EAST, PSE and SAST, whose training targets the kit's own transforms make at a fixed size.

Training: the batch is what the config's own Train transforms make (`ppocr.data.create_operators`, from DecodeImage
to KeepKeys, as `SimpleDataSet` runs them: CopyPaste's extra sample too) of one synthetic image, the crop's size,
holding text boxes over about 40% of it: DB's threshold and shrink maps and masks (MakeBorderMap, MakeShrinkMap),
EAST's score and geometry maps, ..., in the KeepKeys order and dtypes, at the crop's size (EastRandomCropData,
RandomCrop, RandomCropImgMask, EASTProcessTrain, SASTProcessTrain). The loss is the kit's (`build_loss`), on
`model(images)`'s output, as tools/program.py trains a det model. The user's dataset is never read for training: the
crop fixes every training shape (only DBLoss's OHEM keeps up to 3 negatives a positive pixel: a slice of at most
3/4 of the maps, which the boxes' area bounds).

Evaluation: the Eval transforms' `DetResizeForTest` of an image, the model in eval mode (DB returns the shrink map
only), forward only: the kit post-processes on the host. Its size is the config's: a fixed `image_shape`, else the
resize of the largest image the eval set holds (Eval.dataset's label files read, each image's header), where it is
there; else an assumed 1280x720 image (ICDAR2015's, the shipped configs' set), said. `limit_type: min` (the
default, limit_side_len 736) enlarges every image to a shorter side of 736: a long image evaluates long.

FCE, DRRG and CT (targets of as many instances as the image holds), and distilled detectors, are refused by name."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from vramtune.core.errors import BuildError
from vramtune.dialects.kits.config import KitError, get_key
from vramtune.dialects.kits.loader import ReadAhead, kit_read_ahead
from vramtune.dialects.kits.ocr_ema import Swaps, ema, held_state, kept_copies
from vramtune.sources.base import BuiltModel

DETECTORS = ("DB", "DB++", "EAST", "PSE", "SAST")
# what the probe cannot make of these, and what to do instead
MADE = f"the probe makes the training targets of {', '.join(DETECTORS)} only in this version"
REFUSED = {"FCE": ("its targets (FCENetTargets) are Fourier coefficients of every text instance, as many as the image "
                   f"holds: {MADE}"),
           "DRRG": ("its targets (DRRGTargets) are a graph of every text component, as many as the image holds, and "
                    f"its forward takes them: {MADE}"),
           "CT": f"its targets (gt_instance, gt_kernel_instance) number the text instances the image holds: {MADE}",
           "Distillation": ("a teacher and students trained together (CombinedLoss, DistillationModel) are not "
                            "measured in this version: probe the student's own config (PP-OCRv3_mobile_det.yml, "
                            "PP-OCRv4_mobile_det.yml, ...), which trains alone")}
# the Train transforms that give every training image one size, and their size key
CROPS = {"EastRandomCropData": "size", "RandomCrop": "size", "RandomCropImgMask": "size",
         "EASTProcessTrain": "image_shape", "SASTProcessTrain": "image_shape"}
RESIZE = "DetResizeForTest"
ASSUMED_EVAL_IMAGE = (720, 1280)  # (height, width) of ICDAR2015's images, the shipped det configs' eval set
BOXES = (4, 3)  # the synthetic image's text boxes: rows x columns, each a quarter of its width, 15% of its height


def is_detection(config: dict[str, Any]) -> bool:
    return get_key(config, "Architecture.model_type") == "det"


def crop(config: dict[str, Any], path: Any) -> tuple[str, Any]:
    """The Train transform that fixes the training images' size, and that size as the config says it."""
    found = None
    for op in get_key(config, "Train.dataset.transforms", []) or []:
        name = next(iter(op)) if isinstance(op, dict) and op else None
        if name in CROPS:
            found = (name, (op[name] or {}).get(CROPS[name], [640, 640] if name != "EASTProcessTrain" else [512, 512]))
    if found is None:
        raise KitError(f"{path}: Train.dataset.transforms: no crop to a fixed size ({', '.join(CROPS)}), so the "
                       "training images' size is the dataset's: a probe needs one")
    return found


def refuse(config: dict[str, Any], path: Any) -> None:
    """KitError for a detector whose training the probe does not make."""
    algorithm = get_key(config, "Architecture.algorithm")
    if algorithm not in DETECTORS:
        raise KitError(f"{path}: Architecture.algorithm {algorithm} (text detection): {REFUSED.get(algorithm, MADE)}")


def resize_arguments(config: dict[str, Any]) -> dict[str, Any] | None:
    """The Eval transforms' DetResizeForTest arguments ({} for none given), None without one."""
    for op in get_key(config, "Eval.dataset.transforms", []) or []:
        if isinstance(op, dict) and RESIZE in op:
            return op[RESIZE] or {}
    return None


def resized(arguments: dict[str, Any] | None, height: int, width: int) -> tuple[int, int]:
    """(height, width) DetResizeForTest makes of an image (ppocr/data/imaug/operators.py's arithmetic; the probe
    takes the kit's own op's): a fixed image_shape (its width kept in ratio, rounded up to 32, with keep_ratio),
    resize_long (the long side, rounded up to 128), else limit_side_len (736) and limit_type (min: the shorter side
    at least that; max: the longer at most; resize_long), capped at max_side_limit (4000), rounded to 32."""
    if arguments is None:
        return height, width
    if "image_shape" in arguments:
        out_height, out_width = arguments["image_shape"]
        if arguments.get("keep_ratio"):
            out_width = math.ceil(width * out_height / height / 32) * 32
        return int(out_height), int(out_width)
    if "limit_side_len" not in arguments and "resize_long" in arguments:
        ratio = arguments["resize_long"] / max(height, width)
        return tuple((int(side * ratio) + 127) // 128 * 128 for side in (height, width))  # type: ignore[return-value]
    limit, kind = arguments.get("limit_side_len", 736), arguments.get("limit_type", "min")
    if kind == "max":
        ratio = limit / max(height, width) if max(height, width) > limit else 1.0
    elif kind == "min":
        ratio = limit / min(height, width) if min(height, width) < limit else 1.0
    else:
        ratio = limit / max(height, width)
    out_height, out_width = int(height * ratio), int(width * ratio)
    cap = arguments.get("max_side_limit", 4000)
    if max(out_height, out_width) > cap:
        ratio = cap / max(out_height, out_width)
        out_height, out_width = int(out_height * ratio), int(out_width * ratio)
    return max(int(round(out_height / 32) * 32), 32), max(int(round(out_width / 32) * 32), 32)


def eval_images(config: dict[str, Any], checkout: str) -> list[str]:
    """The eval set's image files, as SimpleDataSet finds them (relative paths from the kit's checkout, where
    tools/train.py runs): each label file's lines, `path<tab>label`, under Eval.dataset.data_dir."""
    data_dir = str(get_key(config, "Eval.dataset.data_dir", "") or "")
    delimiter = get_key(config, "Eval.dataset.delimiter", "\t") or "\t"
    files = get_key(config, "Eval.dataset.label_file_list", []) or []
    images = []
    for label_file in files if isinstance(files, list) else [files]:
        try:
            lines = (Path(checkout) / label_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        images += [os.path.join(checkout, data_dir, line.split(delimiter)[0]) for line in lines if line.strip()]
    return images


def eval_source(config: dict[str, Any], checkout: str) -> tuple[int, int, str]:
    """(height, width) of the image whose evaluation is the largest, and how it was found: the eval set's image whose
    DetResizeForTest is the largest where the set is there (run from the kit's checkout), else the assumption."""
    arguments = resize_arguments(config)
    if arguments is not None and "image_shape" in arguments and not arguments.get("keep_ratio"):
        height, width = arguments["image_shape"]
        return int(height), int(width), "every image"
    from PIL import Image

    sizes: dict[tuple[int, int], str] = {}
    for image in eval_images(config, checkout):
        try:
            with Image.open(image) as opened:
                sizes.setdefault((opened.height, opened.width), image)
        except (OSError, ValueError):
            continue
    if not sizes:
        height, width = ASSUMED_EVAL_IMAGE
        return height, width, (f"an assumed {width}x{height} image (ICDAR2015's): the eval set "
                               f"({get_key(config, 'Eval.dataset.label_file_list')}) is not there to read")
    (height, width), image = max(sizes.items(), key=lambda item: math.prod(resized(arguments, *item[0])))
    return height, width, (f"the largest of the eval set's images to evaluate, {os.path.relpath(image, checkout)} "
                           f"({width}x{height})")


def probe_options(config: dict[str, Any]) -> list[str]:
    """Global.pretrained_model where tools/train.py downloads it (a URL): the probe builds random weights, and apply
    says how to train offline."""
    pretrained = str(get_key(config, "Global.pretrained_model") or "")
    return ["Global.pretrained_model=null"] if pretrained.startswith(("http://", "https://")) else []


def warnings(config: dict[str, Any], path: Any, checkout: str) -> list[str]:
    """What the probe makes of a detection config (KitError for one it does not measure), said. The eval set is
    looked for from the kit's checkout, where tools/train.py runs."""
    refuse(config, path)
    name, size = crop(config, path)
    said = [f"{path}: the training set is never read: probes train on a synthetic image cropped to {size} ({name}) "
            f"with {BOXES[0] * BOXES[1]} text boxes, the training targets made by the config's own Train transforms"]
    if get_key(config, "Eval") and get_key(config, "Global.eval_batch_step"):
        height, width, how = eval_source(config, checkout)
        arguments = resize_arguments(config)
        out_height, out_width = resized(arguments, height, width)
        given = ", ".join(f"{key} {value}" for key, value in (arguments or {}).items()) or "limit_side_len 736, " \
            "limit_type min: its defaults"
        resize = f"{RESIZE} ({given})" if arguments is not None else f"no {RESIZE}: full resolution"
        said.append(f"{path}: evaluation at {out_height} x {out_width} (height x width): {resize} of {how}")
    return said


# -- child side ----------------------------------------------------------------------------------------------------
def synthetic_sample(config: dict[str, Any]) -> dict[str, Any]:
    """What SimpleDataSet gives its transforms for one line: the image's bytes (a random JPEG the crop's size, text
    boxes over 40% of it), the label DetLabelEncode reads, the epoch, and CopyPaste's extra sample."""
    import cv2
    import numpy as np

    _, size = crop(config, "Train.dataset.transforms")
    side = max(int(value) for value in (size if isinstance(size, (list, tuple)) else [size, size]))
    image = np.random.default_rng(0).integers(0, 255, (side, side, 3), dtype=np.uint8)
    rows, columns = BOXES
    boxes = []
    for row in range(rows):
        for column in range(columns):
            left, top = side * (0.05 + column / columns), side * (0.05 + row / rows)
            right, bottom = left + side / 4, top + side * 0.15
            boxes.append({"transcription": "text", "points": [[left, top], [right, top], [right, bottom],
                                                               [left, bottom]]})
    return {"img_path": "synthetic.jpg", "label": json.dumps(boxes), "image": cv2.imencode(".jpg", image)[1].tobytes(),
            "filename": "synthetic.jpg", "epoch": 0}


def training_sample(config: dict[str, Any]) -> list[Any]:
    """The Train transforms' output for the synthetic sample, in the KeepKeys order (its random augmentations
    seeded: the same sample every probe)."""
    import random

    import numpy as np
    from ppocr.data import create_operators, transform

    operators = create_operators(config["Train"]["dataset"]["transforms"], config["Global"])
    extra = int(get_key(config, "Train.dataset.ext_op_transform_idx", 2))
    for seed in range(20):
        random.seed(seed)
        np.random.seed(seed)
        data = synthetic_sample(config)
        data["ext_data"] = [transform(synthetic_sample(config), operators[:extra])]
        out = transform(data, operators)
        if out is not None:
            return [np.asarray(item) for item in out]
    raise BuildError("Train.dataset.transforms: the kit's transforms gave no sample for a synthetic image in 20 tries")


def eval_shape(config: dict[str, Any], checkout: str) -> tuple[int, int]:
    """(height, width) of the evaluation images: the kit's own DetResizeForTest of eval_source's image."""
    import numpy as np
    from ppocr.data.imaug.operators import DetResizeForTest

    height, width, _ = eval_source(config, checkout)
    arguments = resize_arguments(config)
    if arguments is None:
        return height, width
    image = DetResizeForTest(**arguments)({"image": np.zeros((height, width, 3), np.uint8)})["image"]
    return int(image.shape[0]), int(image.shape[1])


def build(config: dict[str, Any], checkout: str) -> BuiltModel:
    """The kit's detector, loss and batches, as tools/train.py builds and trains them (called under the checkout, the
    kit's code importable; the config read with its overrides)."""
    import numpy as np
    import paddle
    from ppocr.losses import build_loss
    from ppocr.modeling.architectures import build_model

    model = build_model(config["Architecture"])
    train_loss = build_loss(config["Loss"])
    sample = training_sample(config)
    average, held = ema(config, model), held_state(config, model)
    swaps = Swaps(model, average, kept_copies(config)) if average is not None else None
    height, width = eval_shape(config, checkout) if get_key(config, "Eval") else (0, 0)

    def upcoming(size: int, training: bool) -> list[Any]:
        """A training batch (the loader stacks each key's arrays), or an evaluation one: the images and each one's
        shape (src_h, src_w, ratio_h, ratio_w), as its KeepKeys give them first."""
        if not training:
            return [paddle.randn([size, 3, height, width]), paddle.ones([size, 4], "float64")]
        return [paddle.to_tensor(np.stack([item] * size)) for item in sample]

    def make_batch(size: int) -> list[Any]:
        """The batch trained or evaluated on; evaluating, with the previous one's copy tools/program.py's eval keeps
        while it evaluates the next (`batch_numpy`: Tensor.numpy() copies into memory Paddle allocates)."""
        batch = upcoming(size, model.training)
        return batch if model.training else [*batch, paddle.randn([size, 3, height, width])]

    def loss(network: Any, batch: list[Any]) -> Any:
        if not network.training:  # evaluation: forward only, the maps post-processed on the host
            if swaps:
                swaps.evaluate()
            previous = network(batch[0])  # the previous image's output: eval's `preds`, until the next one returns
            output = network(batch[0])
            del previous
            maps = output["maps"] if isinstance(output, dict) and "maps" in output else next(iter(output.values()))
            return maps.mean()
        if swaps:
            swaps.train()
        total = train_loss(network(batch[0]), batch)["loss"]
        return total.sum() if total.ndim else total  # PSE's is per image: backward() of it is its sum's

    return ReadAhead(make_batch, loss, model, kit_read_ahead(config, "Train.loader"),
                     kit_read_ahead(config, "Eval.loader"), upcoming).built(swaps.after_step if swaps else None, held)
