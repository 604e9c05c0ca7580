"""The repeated blocks of a model that per-block recompute wraps, found by structure.

Detection, without a user path:
1. Candidate blocks are runs of >= 2 consecutive same-type children of any layer, in registration order (the
   forward order of a Sequential, and of the usual `self.a = ...; self.b = ...` models). So
   `Sequential(stem, B, B, B, head)` gives its three B's. Plain Paddle leaf layers (Linear, ReLU) are never blocks;
   plain Sequentials/LayerLists are of one type only if their children's types match too.
2. A plain Sequential/LayerList holding blocks is a stage (ResNet's layer1), not a block: its blocks count.
3. Only outermost blocks count: the ConvNormActivation pairs inside MobileNetV2's InvertedResidual do not.
4. The block type covering the most leaf layers wins; on a tie, the one with more blocks. Coverage rather than
   count, because counting would pick ShuffleNetV2's 15 ConvNormActivations inside its 3 downsampling units over
   its 13 full units.
5. Without any block, the plain Sequential stack with the most layers (VGG's `features`) is cut into segments.
With a user path (`model.block_path`, comma-separated containers; "." is the model itself), the container's runs
are its blocks, else, if it is a Sequential, its segments.

Segments: a new segment starts at each conv/linear layer, so each is one compute layer plus the norm,
activation and pooling layers after it (VGG: conv+ReLU(+pool)). A segment's input is kept for backward anyway
(the conv needs it); recomputing the segment drops everything after it. As a segment starts at a conv/linear
layer, which reads its input without changing it, no in-place op can have changed the input it is recomputed
from. `paddle.incubate.distributed.fleet.recompute_sequential` is not used: it cuts equal-length chunks whatever
the layers, never recomputes its last chunk, recomputes inside one forward call (not r of N separately wrapped
blocks), and in Paddle 3.3.1 fails for segments >= 2 (it unpacks one chunk's output tensor along the batch axis
as the next chunk's arguments). A segment here becomes one Sequential of its layers, recomputed like any block:
what one `_run_func(begin, end)` chunk of recompute_sequential runs under the same `recompute`.

Known cost: a recomputed block runs its forward twice per step, so its BatchNorm layers update their running
mean/variance twice (an effective momentum of m**2 instead of m). Gradients are unaffected (training-mode
BatchNorm normalizes with batch statistics), and Paddle's recompute restores the RNG state, so dropout masks repeat.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import paddle
from paddle.distributed.fleet.utils import recompute

from vramtune.core.errors import BuildError

ROOT = "."  # the block path of the model itself, e.g. MobileNetV1 whose blocks are its direct children
PLAIN_CONTAINERS = (paddle.nn.Sequential, paddle.nn.LayerList)
COMPUTE_LAYERS = (paddle.nn.Linear, paddle.nn.Conv1D, paddle.nn.Conv2D, paddle.nn.Conv3D, paddle.nn.Conv1DTranspose,
                  paddle.nn.Conv2DTranspose, paddle.nn.Conv3DTranspose)


class BlockError(BuildError):
    """The block path does not resolve to repeated blocks."""


@dataclass(frozen=True)
class Slot:
    """One block: the children `keys` of `container`; several keys are one segment of a plain stack."""

    container: paddle.nn.Layer
    keys: tuple[str, ...]

    @property
    def layers(self) -> list[paddle.nn.Layer]:
        return [self.container._sub_layers[key] for key in self.keys]


class _Call:
    """One forward call of a recomputed block, which lets go of the block's inputs once they are recomputed.

    Paddle's hook-based recompute (use_reentrant=False) keeps the function and arguments it was called with until
    the whole graph is freed, so every recomputed block's input would outlive the block's backward: all r inputs
    are still alive when backward ends, where the peak of a weight-heavy model (VGG) is, and recompute would raise
    that peak. Handing recompute this call instead, emptied on its second run (the recomputation in backward),
    frees each input as soon as its block's backward has run, as the reentrant (PyLayer) recompute does. That one
    is not used: it gives no gradient to the parameters of a block whose inputs all stop gradient (VGG's first
    segment, fed the images).
    """

    def __init__(self, forward: Callable[..., Any], args: tuple, kwargs: dict):
        self.forward, self.args, self.kwargs, self.runs = forward, args, kwargs, 0

    def __call__(self, *_markers: paddle.Tensor) -> Any:
        self.runs += 1
        if self.runs > 2:
            raise RuntimeError("a recomputed block frees its inputs after its backward: no second backward through it")
        args, kwargs = self.args, self.kwargs
        if self.runs == 2:
            self.args, self.kwargs = (), {}
        return self.forward(*args, **kwargs)


class RecomputeBlock(paddle.nn.Layer):
    """Mixed into a block's own class (see `_recompute_in_place`): in training its forward runs under recompute,
    so its activations are rebuilt in backward instead of kept."""

    def forward(self, *args, **kwargs):
        forward = super().forward
        if not self.training:
            return forward(*args, **kwargs)
        # Paddle warns when no tensor argument needs grad; it cannot see into the call, so show it a parameter.
        marker = next((p for p in self.parameters() if not p.stop_gradient), None)
        markers = () if marker is None else (marker,)
        return recompute(_Call(forward, args, kwargs), *markers, use_reentrant=False,
                         preserve_rng_state=rng_state_can_be_preserved())


def rng_state_can_be_preserved() -> bool:
    """Paddle 2.6 cannot restore the CPU's RNG state in recompute (it raises); there, dropout masks differ between
    the forward and its recomputation, which changes no memory figure."""
    major = paddle.__version__.split(".")[0]
    return not paddle.get_device().startswith("cpu") or major == "0" or int(major) >= 3


@functools.cache
def _recomputing(cls: type) -> type:
    return type(f"Recomputed{cls.__name__}", (RecomputeBlock, cls), {"__module__": cls.__module__})


def _recompute_in_place(layer: paddle.nn.Layer) -> None:
    """Make this layer object recompute: the model may reach it through a plain Python list (MobileNetV1's dwsl,
    ShuffleNetV2's _block_list, DenseNet's dense_layer_func), where a wrapper in `_sub_layers` would never run."""
    layer.__class__ = _recomputing(type(layer))


def _can_be_block(layer: paddle.nn.Layer | None) -> bool:
    """Not a plain Paddle leaf layer (Linear, ReLU), nor a block already recomputed."""
    if not isinstance(layer, paddle.nn.Layer) or isinstance(layer, RecomputeBlock):
        return False
    return bool(layer._sub_layers) or not type(layer).__module__.startswith("paddle.nn.layer.")


def _is_plain_container(layer: paddle.nn.Layer) -> bool:
    return type(layer) in PLAIN_CONTAINERS


def _kind(layer: paddle.nn.Layer | None) -> Hashable:
    """What makes two layers the same kind of block: the type, and for a plain container its children's types."""
    if _is_plain_container(layer):
        return type(layer), tuple(type(child) for child in layer.children())
    return type(layer)


def _run_keys(container: paddle.nn.Layer) -> list[str]:
    """Keys of the children in runs of >= 2 consecutive children of one kind that can be blocks."""
    groups = itertools.groupby(container._sub_layers.items(), key=lambda item: _kind(item[1]))
    runs = ([key for key, _ in group] for _, group in groups)
    return [key for run in runs if len(run) >= 2 and _can_be_block(container._sub_layers[run[0]]) for key in run]


def _outermost_blocks(layer: paddle.nn.Layer) -> list[Slot]:
    """Blocks not inside another block, in forward order; a plain container that holds blocks is a stage."""
    slots: list[Slot] = []
    run_keys = set(_run_keys(layer))
    for key, child in layer.named_children():
        in_run = key in run_keys
        inner = [] if in_run and not _is_plain_container(child) else _outermost_blocks(child)
        if in_run and not inner:
            slots.append(Slot(layer, (key,)))
        else:
            slots.extend(inner)
    return slots


def _leaf_count(layer: paddle.nn.Layer) -> int:
    return sum(1 for sub in layer.sublayers(include_self=True) if not sub._sub_layers)


def _best_kind(slots: list[Slot]) -> list[Slot]:
    """The slots of the block kind covering the most leaf layers (ties: more blocks), in forward order."""
    by_kind: dict[Hashable, list[Slot]] = {}
    for slot in slots:
        by_kind.setdefault(_kind(slot.layers[0]), []).append(slot)
    if not by_kind:
        return []

    def score(group: list[Slot]) -> tuple[int, int]:
        return sum(_leaf_count(slot.layers[0]) for slot in group), len(group)

    return max(by_kind.values(), key=score)


def _segments(stack: paddle.nn.Sequential) -> list[Slot]:
    """The stack cut before each conv/linear layer that follows one (leading layers join the first segment)."""
    segments: list[list[str]] = [[]]
    computed = False  # whether the current segment has its conv/linear layer yet
    for key, layer in stack.named_children():
        if isinstance(layer, COMPUTE_LAYERS):
            if computed:
                segments.append([])
            computed = True
        segments[-1].append(key)
    return [Slot(stack, tuple(keys)) for keys in segments if keys]


def _is_plain_stack(layer: paddle.nn.Layer) -> bool:
    children = list(layer.children())
    return isinstance(layer, paddle.nn.Sequential) and bool(children) and not any(c._sub_layers for c in children)


def _largest_stack_segments(model: paddle.nn.Layer) -> list[Slot]:
    """Segments of the plain Sequential stack with the most layers that cuts into >= 2 segments."""
    cuts = (_segments(layer) for layer in model.sublayers(include_self=True) if _is_plain_stack(layer))
    candidates = [segments for segments in cuts if len(segments) >= 2]
    return max(candidates, key=lambda segments: len(segments[0].container._sub_layers), default=[])


def _resolve(model: paddle.nn.Layer, path: str) -> paddle.nn.Layer:
    if path == ROOT:
        return model
    node = model
    for part in path.split("."):
        child = node._sub_layers.get(part)
        if not isinstance(child, paddle.nn.Layer):
            children = ", ".join(node._sub_layers) or "none"
            raise BlockError(f"model.block_path: {path!r} does not resolve: no {part!r} (children there: {children})")
        node = child
    return node


def _blocks_at(model: paddle.nn.Layer, path: str) -> list[Slot]:
    """The blocks of the container at a user-given path: its runs, else its segments if it is a Sequential."""
    container = _resolve(model, path)
    slots = _best_kind([Slot(container, (key,)) for key in _run_keys(container)])
    if not slots and isinstance(container, paddle.nn.Sequential):
        slots = _segments(container)
    if not slots:
        raise BlockError(f"model.block_path: {path!r} is {type(container).__name__}: no run of >= 2 same-type blocks "
                         "among its children, and not a Sequential to cut into segments")
    return slots


def find_blocks(model: paddle.nn.Layer, path: str | None = None) -> list[Slot]:
    """The blocks to recompute, in forward order: at `path` (comma-separated containers) or detected."""
    if path:
        return [slot for part in path.split(",") for slot in _blocks_at(model, part.strip())]
    return _best_kind(_outermost_blocks(model)) or _largest_stack_segments(model)


def stop_at_first_rebuild(model: paddle.nn.Layer, path: str | None = None) -> Callable[[], bool] | None:
    """Make the step end where backward first rebuilds a block: the last block's second forward in a step (the
    first is the forward pass) raises out of backward. Returns whether it did; None: no blocks. Every block
    recomputed, the last is the first rebuilt."""
    slots = find_blocks(model, path)
    if not slots:
        return None
    calls: list[bool] = []

    def count(layer: paddle.nn.Layer, inputs: Any) -> None:
        calls.append(True)
        if len(calls) == 2:
            raise RuntimeError("vramtune: the step ends where backward first rebuilds a block (a memory-only probe)")

    slots[-1].layers[-1].register_forward_pre_hook(count)
    return lambda: len(calls) >= 2


def block_path(model: paddle.nn.Layer, slots: list[Slot]) -> str | None:
    """The dotted path(s) of the containers holding the blocks, e.g. 'bert.encoder.layers' or 'layer1,layer2'."""
    names = {id(layer): name or ROOT for name, layer in model.named_sublayers(include_self=True)}
    paths = list(dict.fromkeys(names[id(slot.container)] for slot in slots))
    return ",".join(paths) if paths else None


def _wrap(slot: Slot) -> None:
    """Put the slot's block under recompute. A block keeps its place and parameter names; a segment's layers move
    into one Sequential under the segment's first key (VGG: features.0.weight becomes features.0.0.weight)."""
    if len(slot.keys) == 1:
        _recompute_in_place(slot.layers[0])
        return
    children = slot.container._sub_layers
    segment = paddle.nn.Sequential(*zip(slot.keys, slot.layers))
    _recompute_in_place(segment)
    children[slot.keys[0]] = segment
    for key in slot.keys[1:]:
        del children[key]


def apply_recompute(model: paddle.nn.Layer, recomputed_blocks: int, path: str | None = None) -> tuple[int, str | None]:
    """Recompute the first `recomputed_blocks` blocks; returns (total_blocks, block_path)."""
    if recomputed_blocks < 0:
        raise BlockError(f"recomputed_blocks {recomputed_blocks} is negative")
    slots = find_blocks(model, path)
    if recomputed_blocks > len(slots):
        raise BlockError(f"recomputed_blocks {recomputed_blocks} is more than the {len(slots)} repeated blocks found")
    found = block_path(model, slots)
    for slot in slots[:recomputed_blocks]:
        _wrap(slot)
    return len(slots), found
