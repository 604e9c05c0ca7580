"""A vision-language model counted from its config.json alone (Paddle-free): the vision tower, the aligner that
merges its patches into the language model's tokens, and the language model, laid out and named as PaddleFormers
1.2 builds them (transformers/paddleocr_vl, qwen2_5_vl, ernie4_5_moe_vl), so that LoRA's targets
(cli/utils/llm_utils.py get_lora_target_modules) and `freeze_config` (cli/utils/mllm_utils.py: the LoRA patterns
filtered, or parameters frozen by name prefix) fall where they fall in PaddleFormers, quirks included.

An image becomes (H/p)(W/p) patches in the tower and (H/p)(W/p)/m^2 tokens in the language model (p the patch size,
m the spatial merge); the resolution cap is what PaddleFormers' VL-SFT template resizes to (its plugin's cap: the
YAML's max_pixels does not reach the workflow in 1.2). The tower's activations are counted per patch with the
decoder's coefficients (analytic.py) at linear-memory attention, as flash attention runs it on a GPU.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vramtune.memory.analytic import FUSED, KEPT, SEPARATE, AnalyticActivations, activations
from vramtune.memory.architecture import Architecture, ArchitectureError, Count, Linear, Moe, architecture, count

# the text model PaddleFormers' VL class builds, as a decoder this count knows (its layout: vision.py's `_text`)
TEXT_LAYOUT = {"paddleocr_vl": "llama", "qwen2_5_vl": "qwen2", "ernie4_5_moe_vl": "llama"}
VL_TYPES = tuple(TEXT_LAYOUT)
# the resolution cap of PaddleFormers 1.2's VL template plugins (datasets/template/mm_plugin.py), pixels per image
DEFAULT_MAX_PIXELS = {
    "paddleocr_vl": 2822400,  # PaddleOCRVLPlugin: getattr(image_processor, "max_pixels", 2822400)
    "qwen2_5_vl": 768 * 768,  # Qwen2VLPlugin: getattr(processor, "image_max_pixels", 768 * 768), never set
    "ernie4_5_moe_vl": 28 * 28 * 1280,  # ErnieVLPlugin: getattr(processor, "max_pixels", ...), never set
}
# get_lora_target_modules, per model type (matched with re.fullmatch on each layer's full name)
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "paddleocr_vl": (".*model.*q_proj.*", ".*model.*k_proj.*", ".*model.*v_proj.*", ".*model.*o_proj.*",
                     ".*model.*gate_proj.*", ".*model.*up_proj.*", ".*model.*down_proj.*",
                     ".*visual.*q_proj.*", ".*visual.*k_proj.*", ".*visual.*v_proj.*", ".*visual.*out_proj.*",
                     ".*visual.*fc1.*", ".*visual.*fc2.*", ".*mlp_AR.*linear_1.*", ".*mlp_AR.*linear_2.*"),
    "qwen2_5_vl": (".*qkv_proj.*", ".*up_gate_proj.*", ".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*o_proj.*",
                   ".*gate_proj.*", ".*up_proj.*", ".*down_proj.*", ".*attn.qkv.*", ".*attn.proj.*",
                   ".*gate_proj.*", ".*up_proj.*", ".*down_proj.*", r".*merger.mlp\.[02].*"),
    "ernie4_5_moe_vl": (".*self_attn.*qkv_proj.*", ".*self_attn.*q_proj.*", ".*self_attn.*k_proj.*",
                        ".*self_attn.*v_proj.*", ".*self_attn.*o_proj.*", ".*mlp.*up_gate_proj.*", ".*mlp.*up_proj.*",
                        ".*mlp.*gate_proj.*", ".*mlp.*down_proj.*", "vision_model.blocks.*qkv.*",
                        "vision_model.blocks.*proj.*", "vision_model.blocks.*fc1.*", "vision_model.blocks.*fc2.*",
                        ".*resampler_model.*mlp.*", ".*resampler_model.*spatial_linear.0.*",
                        ".*resampler_model.*spatial_linear.2.*", ".*resampler_model.*temporal_linear.0.*",
                        ".*resampler_model.*temporal_linear.2.*"),
}
# mllm_utils' MultiModelKeys: name prefix -> the part freeze_config names (freeze_vision, freeze_aligner, freeze_llm)
PARTS: dict[str, dict[str, str]] = {
    "paddleocr_vl": {"mlp_AR": "aligner", "model": "llm", "lm_head": "llm", "visual": "vision"},
    "qwen2_5_vl": {"model.visual.merger": "aligner", "model.language_model": "llm", "lm_head": "llm",
                   "model.visual": "vision"},
    "ernie4_5_moe_vl": {"resampler_model": "aligner", "model": "llm", "lm_head": "llm", "mlp": "llm",
                        "self_attn": "llm", "vision_model": "vision"},
}
ALIGNER_BYTES = 16.0  # fp32 bytes per patch and tower width the aligner keeps: its norm, merged input, two outputs
FREEZE_PARTS = ("vision", "aligner", "llm")
TOWER_PREFIXES = ("visual.vision_model", "model.visual.blocks", "model.visual.patch", "vision_model")  # the rest of
# the tower's names are the aligner's (mlp_AR, model.visual.merger, model.resampler_model)


@dataclass
class Tower:
    """The vision tower and the aligner, as PaddleFormers names their layers."""

    hidden: int
    layers: int
    intermediate: int
    patch: int
    merge: int
    fused: bool  # one qkv projection (Qwen2.5-VL, ERNIE-4.5-VL) or three (SigLIP)
    linears: list[Linear]  # every linear layer of the tower and the aligner, full names
    other: dict[str, int]  # every other parameter (norms, embeddings, biases of convolutions), full names -> size
    matmul_other: int = 0  # convolution weights among `other` (AMP O1 keeps a half copy)


@dataclass
class VisionLanguage:
    model_type: str
    text: Architecture
    tower: Tower
    text_prefix: str  # the language model's decoder layers are `{text_prefix}.layers.N`


@dataclass
class VLCount:
    """The whole model's count, and each part's: parameters and trainable ones."""

    total: Count
    parts: dict[str, tuple[int, int]]  # vision, aligner, llm -> (parameters, trainable)
    caught: list[str]  # vision-tower layers LoRA still wraps though freeze_vision asks to leave the tower alone
    strays: dict[str, tuple[str, str]]  # a tower or aligner parameter -> (its part, the part freeze_config takes it
    # for by its name) where they differ


def is_vision_language(config: dict[str, Any]) -> bool:
    return config.get("model_type") in VL_TYPES


def _int(config: dict[str, Any], key: str, *aliases: str, default: int | None = None, where: str = "vision_config."
         ) -> int:
    value = next((config[k] for k in (key, *aliases) if config.get(k) is not None), default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ArchitectureError(f"{where}{key}: a positive integer is required, got {value!r}")
    return value


def _text(config: dict[str, Any], model_type: str) -> Architecture:
    """The language model as a decoder of the layout PaddleFormers builds (PaddleOCR-VL's ERNIE-4.5-0.3B with
    separate projections, Qwen2.5-VL's Qwen2 with fused ones and q/k/v biases), named by the VL model type."""
    base = {k: v for k, v in config.items() if not k.startswith("moe_")}
    return dataclasses.replace(architecture({**base, "model_type": TEXT_LAYOUT[model_type]}), model_type=model_type)


@dataclass
class ErnieVLText(Architecture):
    """ERNIE-4.5-VL's language model: an MoE layer (every moe_layer_interval-th from the first modality's
    moe_layer_start_index to the last one's moe_layer_end_index) holds each modality's experts where the layer is in
    that modality's own range (moe_num_experts, moe_intermediate_size: one entry per modality, text then vision),
    both routers, the shared experts (moe_num_shared_experts x the text experts' width) and the routers' score
    corrections."""

    vision_experts: int = 0
    vision_intermediate: int = 0
    modality_layers: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())  # text, vision

    def layer(self, index: int, mtp: bool = False) -> tuple[list[Linear], int]:
        linears, other = self.attention(), 2 * self.hidden
        moe = self.moe
        if moe is None or index not in self.moe_layers:
            return linears + self.mlp("mlp.", self.intermediate), other
        text = moe.experts - self.vision_experts
        linears += [Linear("mlp.gate", self.hidden, text), Linear("mlp.gate_1", self.hidden, self.vision_experts)]
        for expert in range(moe.experts):
            width = moe.intermediate if expert < text else self.vision_intermediate
            if index in self.modality_layers[expert >= text]:
                linears += self.mlp(f"mlp.experts.{expert}.", width)
        linears += self.mlp("mlp.shared_experts.", moe.shared_intermediate)
        return linears, other + moe.experts


def _ernie_text(config: dict[str, Any]) -> ErnieVLText:
    experts, widths = config.get("moe_num_experts"), config.get("moe_intermediate_size")
    if not (isinstance(experts, list) and isinstance(widths, list) and len(experts) == len(widths) == 2):
        raise ArchitectureError("moe_num_experts, moe_intermediate_size: one entry per modality (text, vision) "
                                f"are required, got {experts!r}, {widths!r}")
    base = _text(config, "ernie4_5_moe_vl")
    starts, ends = (_per_modality(config, key, default) for key, default in
                    (("moe_layer_start_index", 0), ("moe_layer_end_index", base.layers - 1)))
    moe = Moe(experts[0] + experts[1], _int(config, "moe_k", where=""), widths[0],
              config.get("moe_num_shared_experts", 0) * widths[0], router_bias=True)
    every = config.get("moe_layer_interval", 1)
    layers = frozenset(i for i in range(base.layers) if min(starts) <= i <= max(ends) and (i + 1) % every == 0)
    text, vision = (frozenset(i for i in layers if start <= i <= end) for start, end in zip(starts, ends))
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Architecture)}
    return ErnieVLText(**{**fields, "moe": moe, "moe_layers": layers}, vision_experts=experts[1],
                       vision_intermediate=widths[1], modality_layers=(text, vision))


def _per_modality(config: dict[str, Any], key: str, default: int) -> tuple[int, int]:
    """A key given once for both modalities or as [text, vision]."""
    value = config.get(key, default)
    pair = value if isinstance(value, list) else [value, value]
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise ArchitectureError(f"{key}: an integer or one per modality (text, vision) is required, got {value!r}")
    return pair[0], pair[1]


def _blocks(layers: int, at: str, block: Callable[[str], tuple[list[Linear], dict[str, int]]]
            ) -> tuple[list[Linear], dict[str, int]]:
    """The tower's layers, `block` laying out one at its name prefix."""
    linears: list[Linear] = []
    other: dict[str, int] = {}
    for i in range(layers):
        more, norms = block(f"{at}{i}.")
        linears += more
        other.update(norms)
    return linears, other


def _paddleocr_tower(vision: dict[str, Any], text_hidden: int) -> Tower:
    """SigLIP's layers (q/k/v/out with biases, fc1/fc2, LayerNorms with biases), its learned and packing position
    embeddings, and the projector mlp_AR (a LayerNorm, then 2x2 patches merged through two linear layers)."""
    h, f = _int(vision, "hidden_size"), _int(vision, "intermediate_size")
    p, m = _int(vision, "patch_size"), _int(vision, "spatial_merge_size")
    linears, other = _blocks(_int(vision, "num_hidden_layers"), "visual.vision_model.encoder.layers.", lambda at: (
        [*(Linear(f"{at}self_attn.{n}", h, h, True) for n in ("q_proj", "k_proj", "v_proj", "out_proj")),
         Linear(f"{at}mlp.fc1", h, f, True), Linear(f"{at}mlp.fc2", f, h, True)],
        {f"{at}layer_norm1": 2 * h, f"{at}layer_norm2": 2 * h}))
    embeddings = "visual.vision_model.embeddings."
    conv = _int(vision, "num_channels", default=3) * p * p * h
    positions = (_int(vision, "image_size") // p) ** 2
    other.update({f"{embeddings}patch_embedding": conv + h, f"{embeddings}position_embedding": positions * h,
                  f"{embeddings}packing_position_embedding": 32768 * h, "visual.vision_model.post_layernorm": 2 * h,
                  "mlp_AR.pre_norm": 2 * h})
    merged = h * m * m
    linears += [Linear("mlp_AR.linear_1", merged, merged, True), Linear("mlp_AR.linear_2", merged, text_hidden, True)]
    return Tower(h, _int(vision, "num_hidden_layers"), f, p, m, False, linears, other, conv)


def _qwen_tower(vision: dict[str, Any], text_hidden: int) -> Tower:
    """Qwen2.5-VL's blocks (fused qkv, a gated MLP, all with biases; RMSNorms), its 3D patch embedding over
    temporal_patch_size frames, and the merger (an RMSNorm, then two linear layers over 2x2 patches)."""
    h, f, depth = _int(vision, "hidden_size"), _int(vision, "intermediate_size"), _int(vision, "depth")
    p, m = _int(vision, "patch_size"), _int(vision, "spatial_merge_size")
    linears, other = _blocks(depth, "model.visual.blocks.", lambda at: (
        [Linear(f"{at}attn.qkv", h, 3 * h, True), Linear(f"{at}attn.proj", h, h, True),
         *(Linear(f"{at}mlp.{n}", h, f, True) for n in ("gate_proj", "up_proj")),
         Linear(f"{at}mlp.down_proj", f, h, True)], {f"{at}norm1": h, f"{at}norm2": h}))
    conv = _int(vision, "in_chans", "in_channels", default=3) * _int(vision, "temporal_patch_size") * p * p * h
    other.update({"model.visual.patch_embed.proj": conv, "model.visual.merger.ln_q": h})
    merged, out = h * m * m, _int(vision, "out_hidden_size", default=text_hidden)
    linears += [Linear("model.visual.merger.mlp.0", merged, merged, True),
                Linear("model.visual.merger.mlp.2", merged, out, True)]
    return Tower(h, depth, f, p, m, True, linears, other, conv)


def _ernie_tower(config: dict[str, Any], vision: dict[str, Any], text_hidden: int) -> Tower:
    """ERNIE-4.5-VL's ViT blocks (fused qkv, fc1/fc2 of mlp_ratio, LayerNorms with biases) and the resampler: 2x2
    patches through spatial_linear, two frames through temporal_linear (built for images too), then to the text
    width."""
    h = _int(vision, "embed_dim", "hidden_size")
    f, depth = h * _int(vision, "mlp_ratio"), _int(vision, "depth")
    p, m = _int(vision, "patch_size"), _int(vision, "spatial_merge_size")
    linears, other = _blocks(depth, "vision_model.blocks.", lambda at: (
        [Linear(f"{at}attn.qkv", h, 3 * h, True), Linear(f"{at}attn.proj", h, h, True),
         Linear(f"{at}mlp.fc1", h, f, True), Linear(f"{at}mlp.fc2", f, h, True)],
        {f"{at}norm1": 2 * h, f"{at}norm2": 2 * h}))
    conv = _int(vision, "in_chans", "in_channels", default=3) * p * p * h
    other.update({"vision_model.patch_embed.proj": conv, "vision_model.ln": 2 * h})
    spatial = _int(config, "pixel_hidden_size", where="") * _int(config, "spatial_conv_size", where="") ** 2
    temporal = spatial * _int(config, "temporal_conv_size", where="")
    at = "model.resampler_model."
    linears += [Linear(f"{at}spatial_linear.0", spatial, spatial, True),
                Linear(f"{at}spatial_linear.2", spatial, spatial, True),
                Linear(f"{at}temporal_linear.0", temporal, spatial, True),
                Linear(f"{at}temporal_linear.2", spatial, spatial, True),
                Linear(f"{at}mlp", spatial, text_hidden, True)]
    other.update({f"{at}spatial_linear.3": 2 * spatial, f"{at}temporal_linear.3": 2 * spatial,
                  f"{at}after_norm": text_hidden})
    return Tower(h, depth, f, p, m, True, linears, other, conv)


def vision_language(config: dict[str, Any]) -> VisionLanguage:
    """The sizes of a vision-language config.json (paddleocr_vl, qwen2_5_vl, ernie4_5_moe_vl)."""
    model_type = str(config.get("model_type"))
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        raise ArchitectureError(f"vision_config: {model_type} needs its vision tower's sizes (a mapping)")
    text = _ernie_text(config) if model_type == "ernie4_5_moe_vl" else _text(config, model_type)
    if model_type == "paddleocr_vl":
        return VisionLanguage(model_type, text, _paddleocr_tower(vision, text.hidden), "model")
    if model_type == "qwen2_5_vl":
        return VisionLanguage(model_type, text, _qwen_tower(vision, text.hidden), "model.language_model")
    return VisionLanguage(model_type, text, _ernie_tower(config, vision, text.hidden), "model")


def lora_targets(model_type: str, freeze: str) -> list[str]:
    """PaddleFormers' LoRA patterns with freeze_config applied as get_multimodel_lora_target_modules applies it: a
    pattern is dropped when the longest part prefix found inside the pattern's text names a frozen part (a pattern
    naming no prefix stays, whatever it matches)."""
    parts = PARTS[model_type]
    frozen = {part for part in FREEZE_PARTS if f"freeze_{part}" in freeze}
    prefixes = sorted(parts, key=len, reverse=True)
    kept = []
    for pattern in LORA_TARGETS[model_type]:
        owner = next((parts[p] for p in prefixes if p in pattern), None)
        if owner not in frozen:
            kept.append(pattern)
    return kept


def part_of(model_type: str, name: str) -> str:
    """The part freeze_model_parameters assigns a parameter to: the first prefix (longest first) the name starts
    with; a name no prefix starts stays trainable ("")."""
    prefixes = sorted(PARTS[model_type], key=len, reverse=True)
    match = re.match("^(" + "|".join(re.escape(p) for p in prefixes) + ")", name)
    return PARTS[model_type][match.group()] if match else ""


def count_vl(vl: VisionLanguage, lora_rank: int | None = None, freeze: str = "") -> VLCount:
    """Every parameter as PaddleFormers builds the model, and the trainable ones: LoRA's A and B on the layers the
    (filtered) patterns match, or every parameter of the parts freeze_config leaves (full fine-tuning)."""
    frozen = {part for part in FREEZE_PARTS if f"freeze_{part}" in freeze}
    targets = lora_targets(vl.model_type, freeze)
    patterns = [re.compile(p) for p in targets]
    text = count(vl.text, lora_rank, targets, vl.text_prefix)
    # freeze_model_parameters sets every parameter it does not freeze trainable, the routers' corrections too
    text_trainable = text.trainable
    if not lora_rank and freeze:
        text_trainable = 0 if "llm" in frozen else text.params
    parts = {"vision": [0, 0], "aligner": [0, 0], "llm": [text.params, text_trainable]}
    matmul, lora, targeted, caught, strays = text.matmul, 0, text.lora_targets, [], {}
    entries: list[tuple[str, int, Linear | None]] = [(lin.name, lin.params, lin) for lin in vl.tower.linears]
    entries += [(name, size, None) for name, size in vl.tower.other.items()]
    for name, size, linear in entries:
        own = "vision" if name.startswith(TOWER_PREFIXES) else "aligner"
        parts[own][0] += size
        if part_of(vl.model_type, name) not in (own, ""):
            strays[name] = (own, part_of(vl.model_type, name))
        if linear is not None:
            matmul += linear.inputs * linear.outputs
            if lora_rank and any(p.fullmatch(name) for p in patterns):
                added = lora_rank * (linear.inputs + linear.outputs)
                lora += added
                targeted += 1
                parts[own][0] += added
                parts[own][1] += added
                if own == "vision" and "vision" in frozen:
                    caught.append(name)
        if not lora_rank and part_of(vl.model_type, name) not in frozen:
            parts[own][1] += size
    matmul += vl.tower.matmul_other
    params = text.params + sum(lin.params for lin in vl.tower.linears) + sum(vl.tower.other.values()) + lora
    trainable = sum(t for _, t in parts.values())
    total = Count(params, trainable, matmul, text.active + params - text.params - lora, text.embeddings, targeted)
    return VLCount(total, {k: (v[0], v[1]) for k, v in parts.items()}, caught, strays)


def image_tokens(vl: VisionLanguage, max_pixels: int) -> tuple[int, int]:
    """(patches, tokens) of the largest image the cap lets through: smart_resize keeps each side a multiple of
    patch x merge and the area within max_pixels, so at most max_pixels / (p m)^2 tokens, m^2 patches each."""
    unit = (vl.tower.patch * vl.tower.merge) ** 2
    tokens = max(1, max_pixels // unit)
    return tokens * vl.tower.merge**2, tokens


def default_max_pixels(model_type: str, folder: Path | None) -> tuple[int, str]:
    """The cap the VL-SFT template applies, and where it comes from: PaddleOCR-VL's image processor's (the folder's
    preprocessor_config.json where it says one), else the template plugin's own default."""
    if model_type == "paddleocr_vl" and folder is not None:
        try:
            value = json.loads((folder / "preprocessor_config.json").read_text()).get("max_pixels")
        except (OSError, ValueError, AttributeError):
            value = None
        if isinstance(value, int) and value > 0:
            return value, "the model folder's preprocessor_config.json"
    return DEFAULT_MAX_PIXELS[model_type], "PaddleFormers 1.2's VL template's own cap (datasets/template/mm_plugin.py)"


@dataclass
class VisionActivations:
    """The language model's activations (analytic.py, at the whole sequence: text and image tokens) beside the
    tower's for the patches of one sample: every tower layer's when the tower is trained (LoRA or full), each
    layer's input alone when recompute is on (the workflow copies recompute into vision_config), nothing kept when
    the tower and aligner are frozen (no gradient flows into them)."""

    text: AnalyticActivations
    tower_layer: float  # bytes per sample of one tower layer
    tower_kept: float  # per sample, what a recomputed tower layer keeps
    tower_outside: float  # per sample: the patch embeddings and the aligner
    tower_layers: int
    tower_trained: bool  # a gradient flows into the tower
    aligner_trained: bool  # into the aligner (or through it, into the tower)
    floor: float = 0.0

    def activations(self, layers: int, micro_batch: int, recomputed: int) -> float:
        text = self.text.activations(layers, micro_batch, recomputed)
        per_layer = self.tower_kept if recomputed else self.tower_layer
        tower = self.tower_layers * per_layer if self.tower_trained else 0.0
        return text + micro_batch * (tower + (self.tower_outside if self.aligner_trained else 0.0))


def tower_layer_bytes(tower: Tower, patches: int) -> float:
    """One tower layer's fp32 activations for `patches` patches: the decoder's per-token coefficients (fused or
    separate projections) at the tower's width, every head a key/value head, no [P, P] term (flash attention)."""
    c = FUSED if tower.fused else SEPARATE
    return patches * (c.hidden * tower.hidden + c.kv * tower.hidden + c.intermediate * tower.intermediate)


def vl_activations(vl: VisionLanguage, seq: int, patches: int, flash: bool, tower_trained: bool,
                   aligner_trained: bool) -> VisionActivations:
    """The sample's activations: the language model at `seq` tokens, the tower at `patches` patches."""
    tower = vl.tower
    outside = patches * (4.0 * 3 * tower.patch**2 + 4.0 * tower.hidden + ALIGNER_BYTES * tower.hidden)
    return VisionActivations(activations(vl.text, seq, flash), tower_layer_bytes(tower, patches),
                             KEPT * patches * tower.hidden, outside, tower.layers, tower_trained, aligner_trained)
