"""A vision-language row's images as PaddleFormers 1.2's PaddleOCR-VL template and processor size them (Paddle-free):
the processor's smart_resize (sides to multiples of 28, the area clamped to [min_pixels, max_pixels]), the template's
pre-resize to that clamp, then its random augmentation, of which only the scale (RandomScale 0.5-1.5, p=0.5) and the
single-side padding (0-15 px, p=0.1) change the size: its worst case is both at their largest, after which the
processor clamps again. Patches are (H/14)(W/14), tokens patches / merge_size^2 (plus the template's start and end
tokens). The worst row is the one whose micro-batch has the most tokens, then the most patches."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

FACTOR = 28  # patch_size 14 x merge_size 2
MIN_PIXELS, MAX_PIXELS = 147384, 2822400  # the template's clamp: PaddleOCRVLPlugin._get_mm_inputs' defaults
SCALE_MAX = 1.5  # PaddleOCRVLPlugin's RandomScale(scale_range=(0.5, 1.5))
PADDING_MAX = 15  # its RandomSingleSidePadding(padding_range=(0, 15))
AUGMENTATION = (f"augmentation at its worst: every image scaled by {SCALE_MAX} and padded {PADDING_MAX} px on one "
                "side (PaddleOCR-VL's template scales by 0.5-1.5 and pads 0-15 px at random), then clamped by the "
                "processor")


def smart_resize(height: int, width: int, factor: int = FACTOR, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """paddleformers.transformers.paddleocr_vl.image_processor.smart_resize: (height, width)."""
    if height < factor:
        width, height = round((width * factor) / height), factor
    if width < factor:
        height, width = round((height * factor) / width), factor
    if max(height, width) / min(height, width) > 200:
        ratio = max(height, width) / min(height, width)
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {ratio}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar, w_bar = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def worst_size(height: int, width: int, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS,
               augmentation: bool = True) -> tuple[int, int]:
    """The largest (height, width) the template hands the model for an image of this size: pre-resized to the clamp,
    augmentation's largest scale and padding (the side that gives more patches), clamped by the processor again."""
    height, width = smart_resize(height, width, min_pixels=min_pixels, max_pixels=max_pixels)
    if not augmentation:
        return height, width
    height, width = int(height * SCALE_MAX), int(width * SCALE_MAX)
    return max((smart_resize(height + PADDING_MAX, width, min_pixels=min_pixels, max_pixels=max_pixels),
                smart_resize(height, width + PADDING_MAX, min_pixels=min_pixels, max_pixels=max_pixels)),
               key=lambda size: (size[0] * size[1], size))


def patches(height: int, width: int, patch: int = 14) -> int:
    return (height // patch) * (width // patch)


def worst_row(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The row whose micro-batch is largest: the most tokens, then the most patches; the first such row on ties.
    Rows: {"tokens": int, "patches": int, ...}."""
    found = None
    for row in rows:
        if found is None or (row["tokens"], row["patches"]) > (found["tokens"], found["patches"]):
            found = row
    return found


def describe(row: dict[str, Any], max_seq_len: int) -> str:
    """The row measured, in words: which, its images' sizes before and after the resizes, its patches and tokens."""
    images = "; ".join(f"{image['name']} {image['width']}x{image['height']} -> {image['resized'][1]}x"
                       f"{image['resized'][0]}" for image in row["images"]) or "no image"
    return (f"sequence length {row['tokens']}: the worst of the {row['kept']} training rows kept (max_seq_len "
            f"{max_seq_len}): row {row['row']} ({images}), {row['patches']} patches, {row['tokens']} tokens; "
            + (AUGMENTATION if row.get("augmentation") else "no augmentation in this template"))
