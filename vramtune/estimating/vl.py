"""The config.json estimate of a vision-language model's fine-tuning (PaddleFormers' VL-SFT): what the question adds
for images (the resolution cap, images per row, freeze_config), and per fine-tuning the count and the activations
the rows are predicted from (memory/vision.py). Estimated only: no VL probe exists in this version."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramtune.memory.architecture import Count
from vramtune.memory.vision import (
    VisionActivations,
    VisionLanguage,
    count_vl,
    default_max_pixels,
    image_tokens,
    is_vision_language,
    vision_language,
    vl_activations,
)


@dataclass(frozen=True)
class Images:
    """How a VL run's rows hold images: the cap every image is resized within, and whether rows are packed."""

    max_pixels: int
    cap_source: str  # where the cap comes from, in words
    packing: bool = False
    freeze: str = ""  # freeze_config


def default_images(model_type: str, folder: Path | None, packing: bool = False, freeze: str = "") -> Images:
    """The cap PaddleFormers' VL-SFT template applies for this model type (the YAML's max_pixels does not reach it)."""
    max_pixels, source = default_max_pixels(model_type, folder)
    return Images(max_pixels, source, packing, freeze)


@dataclass(frozen=True)
class Sample:
    """One row's image load: images at the cap, their tokens among the row's, their patches in the tower."""

    images: int
    tokens: int
    patches: int
    tokens_per_image: int
    patches_per_image: int


def sample(vl: VisionLanguage, images: Images, seq_len: int) -> Sample:
    """The worst row: one image at the cap, or with packing as many as the row holds; the row's image tokens never
    beyond the sequence (PaddleFormers deletes a longer row)."""
    patches, tokens = image_tokens(vl, images.max_pixels)
    count = max(1, seq_len // tokens) if images.packing else 1
    held = min(count * tokens, seq_len)
    return Sample(count, held, held * vl.tower.merge**2, tokens, patches)


@dataclass(frozen=True)
class Asked:
    """A vision-language model and how its rows hold images: what the config.json answer asks of this module."""

    vl: VisionLanguage
    images: Images

    def counted(self, lora_rank: int | None) -> Count:
        return count_vl(self.vl, lora_rank, self.images.freeze).total

    def fit(self, lora_rank: int | None, seq_len: int, flash: bool) -> VisionActivations:
        """The fine-tuning's activations: the tower's and the aligner's kept only where a gradient flows into them
        (their parameters, or LoRA's on them, trained)."""
        parts = count_vl(self.vl, lora_rank, self.images.freeze).parts
        return vl_activations(self.vl, seq_len, sample(self.vl, self.images, seq_len).patches, flash,
                              parts["vision"][1] > 0, parts["vision"][1] + parts["aligner"][1] > 0)

    def notes(self, seq_len: int, lora_rank: int) -> list[str]:
        return notes(self.vl, self.images, seq_len, lora_rank)

    def to_json(self, seq_len: int, lora_rank: int) -> dict[str, Any]:
        return vl_json(self.vl, self.images, seq_len, lora_rank)


def asked(config: dict[str, Any], images: Images | None) -> Asked | None:
    """The vision-language model a config.json describes (None: a decoder), its images the question's or, for a
    config asked without them, the template's cap."""
    if not is_vision_language(config):
        return None
    vl = vision_language(config)
    return Asked(vl, images or default_images(vl.model_type, None))


def notes(vl: VisionLanguage, images: Images, seq_len: int, lora_rank: int) -> list[str]:
    """What the VL answer counted and assumed, and what freeze_config does to LoRA here."""
    row = sample(vl, images, seq_len)
    full, lora = count_vl(vl, None, images.freeze), count_vl(vl, lora_rank, images.freeze)
    trained = ", ".join(f"{part} {lora.parts[part][1]:,}" for part in ("vision", "aligner", "llm"))
    tower = vl.tower
    said = [
        f"vision-language ({vl.model_type}): counted by part: vision tower {full.parts['vision'][0]:,} "
        f"({tower.layers} layers, width {tower.hidden}), aligner {full.parts['aligner'][0]:,}, language model "
        f"{full.parts['llm'][0]:,}; LoRA r={lora_rank} on PaddleFormers' {vl.model_type} targets trains {trained}"
        + (f"; full fine-tuning with freeze_config {images.freeze!r} trains {full.total.trainable:,}"
           if images.freeze else ""),
        f"assumed: every image at the resolution cap, {images.max_pixels:,} pixels ({images.cap_source}): "
        f"{row.tokens_per_image:,} tokens ({row.patches_per_image:,} patches of {tower.patch}x{tower.patch}, "
        f"merged {tower.merge}x{tower.merge}) per image; {row.images} image(s) per row"
        + (" (packing fills the row)" if images.packing else "")
        + f": {row.tokens:,} of the row's {seq_len:,} tokens are an image's, {row.patches:,} patches in the tower"
        + ("; random augmentation scales are clamped back to the cap by the processor" if vl.model_type ==
           "paddleocr_vl" else ""),
        "assumed: the vision tower at linear-memory (flash) attention as a GPU runs it (no [patches, patches] "
        f"scores), its activations per patch with PaddleFormers' {'ERNIE-4.5' if tower.fused else 'Llama'} "
        "coefficients at the tower's width; kept only where a gradient flows into the tower",
        "estimated from config.json, not probed: vramtune measure and probe measure PaddleOCR-VL's VL-SFT on its "
        "training data's worst row (the other VL models and stages are refused in this version)",
    ]
    strays = {name: parts for name, parts in full.strays.items()
              if any(f"freeze_{part}" in images.freeze for part in parts)}
    if strays:
        name, (own, taken) = next(iter(strays.items()))
        said.append(f"freeze_config {images.freeze!r}: PaddleFormers assigns parameters to parts by name prefix: "
                    f"{len(strays)} of the {own}'s count as the {taken}'s (e.g. {name}), frozen or trained with it "
                    "(counted so)")
    if lora.caught:
        said.append(f"freeze_config {images.freeze!r} under LoRA: PaddleFormers drops the vision patterns, but its "
                    f"language-model patterns still match {len(lora.caught)} vision-tower layers (e.g. "
                    f"{lora.caught[0]}): LoRA trains them anyway (counted)")
    return said


def vl_json(vl: VisionLanguage, images: Images, seq_len: int, lora_rank: int) -> dict[str, Any]:
    row = sample(vl, images, seq_len)
    full, lora = count_vl(vl, None, images.freeze), count_vl(vl, lora_rank, images.freeze)
    return {"model_type": vl.model_type, "max_pixels": images.max_pixels, "images_per_row": row.images,
            "image_tokens": row.tokens, "patches": row.patches, "freeze_config": images.freeze,
            "parts": {part: {"params": full.parts[part][0], "full_trainable": full.parts[part][1],
                             "lora_trainable": lora.parts[part][1]} for part in full.parts},
            "lora_caught_in_vision": len(lora.caught)}
