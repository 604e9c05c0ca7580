"""Child side: the worst row of a VL-SFT run's training data, made by PaddleFormers' own dataset, template and
processor (one pass in order, as lengths.py makes the text path's longest sample), with the template's random
augmentation replaced by its worst case (images.py says which) so the pass is deterministic and the row found is the
largest the run can meet. Imports Paddle and PaddleFormers."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from vramtune.dialects.paddleformers import images as sizes


class WorstAugmentation:
    """Stands for PaddleOCRVLPlugin.image_augmentation: the largest scale, then the largest padding on the side that
    gives the processor more patches (white, as RandomSingleSidePadding fills)."""

    def __init__(self, min_pixels: int, max_pixels: int):
        self.min_pixels, self.max_pixels = min_pixels, max_pixels

    def __call__(self, image: Any) -> Any:
        from PIL import Image

        width, height = int(image.width * sizes.SCALE_MAX), int(image.height * sizes.SCALE_MAX)
        image = image.resize((width, height))
        taller = sizes.smart_resize(height + sizes.PADDING_MAX, width, min_pixels=self.min_pixels,
                                    max_pixels=self.max_pixels)
        wider = sizes.smart_resize(height, width + sizes.PADDING_MAX, min_pixels=self.min_pixels,
                                   max_pixels=self.max_pixels)
        grow_height = (taller[0] * taller[1], taller) >= (wider[0] * wider[1], wider)
        padded = Image.new(image.mode, (width + (0 if grow_height else sizes.PADDING_MAX),
                                        height + (sizes.PADDING_MAX if grow_height else 0)), "white")
        padded.paste(image, (0, 0))
        return padded


def _row(sequence: Any, kept: int) -> dict[str, Any]:
    from PIL import Image

    grids = [[int(x) for x in grid] for grid in sequence.mm_inputs.get("image_grid_thw", [])]
    described = []
    for path, grid in zip(sequence.images, grids):
        name = path if isinstance(path, str) else "(image)"
        try:
            with Image.open(path) as image:
                width, height = image.size
        except (OSError, AttributeError, TypeError):
            width = height = 0
        described.append({"name": Path(name).name, "width": width, "height": height,
                          "resized": [grid[1] * 14, grid[2] * 14]})
    return {"row": kept, "tokens": len(sequence.token_ids), "patches": sum(t * h * w for t, h, w in grids),
            "images": described}


def worst(model_args: Any, data_args: Any, training_args: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(the worst sequence or None, its row in words' fields, the tokenizer/processor/template the run uses)."""
    from paddleformers.datasets.template.template import get_template_and_fix_tokenizer
    from paddleformers.transformers import AutoProcessor, AutoTokenizer

    from vramtune.dialects.paddleformers.model import dataset_config, kept_sequences

    folder = model_args.model_name_or_path
    with contextlib.redirect_stdout(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name_or_path or folder)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token_id = tokenizer.eos_token_id
        processor = AutoProcessor.from_pretrained(folder, use_fast=data_args.processor_use_fast)
        config = {**dataset_config(model_args, data_args, training_args, tokenizer), "processor": processor}
        template = get_template_and_fix_tokenizer(config)
        config["template_instance"] = template
        plugin = template.mm_plugin
        augmented = hasattr(plugin, "image_augmentation")
        if augmented:
            image_processor = processor.image_processor
            plugin.image_augmentation = WorstAugmentation(image_processor.min_pixels, image_processor.max_pixels)
        found, row, kept = None, None, 0
        for sequence in kept_sequences(data_args, config):
            kept += 1
            candidate = _row(sequence, kept)
            if sizes.worst_row([row, candidate] if row else [candidate]) is candidate:
                found, row = sequence, candidate
    if row is not None:
        row.update(kept=kept, augmentation=augmented)
    return found, row or {"kept": 0}, {"tokenizer": tokenizer, "processor": processor, "template": template}
