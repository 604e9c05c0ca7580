"""A strategy: one value for every memory field (precision, micro_batch, accumulation, recomputed_blocks, ...). Pure
data, importable without Paddle or any plugin: the fields are declared here, with their `vramtune measure` flags, and
so is their vocabulary (the precisions and what they mean), which dialects and mechanisms alike name freely.

Adding a mechanism with a field of its own adds the field here: its type, default, flag, check and label part."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from vramtune.core.reading import positive

# -- the vocabulary of precisions -------------------------------------------------------------------------------
PURE = "-o2"  # suffix of the O2 precisions
SAFE = "-safe"  # fp16-safe: fp16 with the ops that overflow first kept in fp32 (the guide's answer to a NaN
#                 loss under fp16, after bf16); tried only when fp16 came back unstable
# least memory first: O2 never takes more than O1, and fp16 takes the bytes bf16 takes
AMP_PRECISIONS = ("fp16-o2", "bf16-o2", "fp16", "bf16")
PRECISIONS = ("fp32", *AMP_PRECISIONS, "fp16-safe")
AMP_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # Paddle's names
# what fp16-safe keeps in fp32: the ops that overflow first in fp16 (auto_cast's custom black list)
SAFE_BLACK_LIST = ("softmax", "softmax_with_cross_entropy", "cross_entropy", "cross_entropy_with_softmax", "exp",
                   "log", "log_softmax", "layer_norm", "rms_norm", "mean", "reduce_mean", "sum", "reduce_sum",
                   "pow", "square", "sqrt", "rsqrt", "gelu", "silu", "tanh", "sigmoid", "batch_norm")
GRANULARITIES = ("full", "full_attn", "core_attn")  # full: the whole block; the others only PaddleNLP models know
SHARDING_STAGES = (0, 1, 2, 3)


def dtype_of(precision: str) -> str:
    """fp32, fp16 or bf16: the number format a precision computes in."""
    return precision.removesuffix(PURE).removesuffix(SAFE)


def level_of(precision: str) -> str:
    """Paddle's AMP level: O0 (fp32), O1 (auto_cast) or O2 (decorated, pure half)."""
    return "O0" if precision == "fp32" else "O2" if precision.endswith(PURE) else "O1"


# -- the fields ---------------------------------------------------------------------------------------------------
Facts = dict[str, Any]  # what the probes learned about the model (ProbeResult.facts: flat, each key named once)


@dataclass(frozen=True)
class Field:
    """One strategy field: its `vramtune measure` flag, what the flag accepts, and its part of a strategy's label."""

    name: str
    type: type
    default: Any
    flag: str
    short: str
    help: str
    group: str  # the mechanism whose field it is: `Strategy.label(without=...)` leaves a group's parts out
    check: Callable[[Any], str | None] = lambda value: None
    choices: tuple[str, ...] | None = None  # the values the flag accepts (shown in --help)
    label: Callable[[Strategy, Facts], str] | None = None  # its part of the label ("" when off); None: none


def _one_of(allowed: tuple[Any, ...], words: str) -> Callable[[Any], str | None]:
    return lambda value: None if value in allowed else f"must be {words}, got {value!r}"


def _not_negative(value: int) -> str | None:
    return None if value >= 0 else f"must be 0 or more, got {value}"


def _flag(value: bool) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


def _recompute_label(strategy: Strategy, facts: Facts) -> str:
    granularity, total = strategy.recompute_granularity, facts.get("total_blocks")
    return (f"r={strategy.recomputed_blocks}" + (f"/{total}" if total else "")
            + (f":{granularity}" if granularity != "full" else ""))


FIELDS: dict[str, Field] = {field.name: field for field in (
    Field("precision", str, "fp32", "--precision", "-p", "fp32 | fp16 | bf16 (AMP O1) | fp16-o2 | bf16-o2 (pure half, "
          "fp32 master weights) | fp16-safe (fp16, overflow-prone ops in fp32)", "precision",
          _one_of(PRECISIONS, f"one of {', '.join(PRECISIONS)}"), PRECISIONS, lambda s, facts: s.precision),
    Field("micro_batch", int, 1, "--micro-batch", "-m", "samples per forward/backward", "accumulation", positive(),
          label=lambda s, facts: f"m={s.micro_batch} k={s.accumulation}"),
    Field("accumulation", int, 1, "--accumulation", "-k", "micro-batches per optimizer step (default: target / "
          "micro)", "accumulation", positive()),
    Field("recomputed_blocks", int, 0, "--recompute", "-r", "number of repeated blocks to recompute", "recompute",
          _not_negative, label=_recompute_label),
    Field("recompute_granularity", str, "full", "--granularity", "-g", "what a recomputed block recomputes: full, "
          "or (PaddleNLP models that support it) full_attn / core_attn", "recompute",
          _one_of(GRANULARITIES, f"one of {', '.join(GRANULARITIES)}")),
    Field("devices", int, 1, "--devices", "-n", "data-parallel ranks on this node", "data_parallel", positive(1024),
          label=lambda s, facts: f"n={s.devices}" if s.devices > 1 else ""),
    Field("sharding_stage", int, 0, "--sharding-stage", "-s", "ZeRO-style sharding over the ranks: 1 optimizer "
          "state, 2 + gradients, 3 + parameters", "sharding", _one_of(SHARDING_STAGES, "0, 1, 2 or 3"),
          label=lambda s, facts: f"s={s.sharding_stage}" if s.sharding_stage else ""),
    Field("tensor_parallel", int, 1, "--tensor-parallel", "-T", "tensor-parallel ranks each layer is split over "
          "(a PaddleFormers model's own split; launched beside the data-parallel ones)", "tensor_parallel",
          positive(1024), label=lambda s, facts: f"tp={s.tensor_parallel}" if s.tensor_parallel > 1 else ""),
    Field("sequence_parallel", bool, False, "--sequence-parallel", "-S", "with tensor parallelism, the activations "
          "outside attention and the MLP split along the sequence", "tensor_parallel", _flag,
          label=lambda s, facts: "sp" if s.sequence_parallel else ""),
    Field("to_static", bool, False, "--to-static", "-t", "compile the forward with paddle.jit.to_static",
          "to_static", _flag, label=lambda s, facts: "static" if s.to_static else ""),
)}


@dataclass(frozen=True)
class Strategy:
    """One probe's memory strategy: a value per field. Immutable and hashable."""

    precision: str = "fp32"
    micro_batch: int = 1
    accumulation: int = 1
    recomputed_blocks: int = 0
    recompute_granularity: str = "full"
    devices: int = 1
    sharding_stage: int = 0
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    to_static: bool = False

    @property
    def batch(self) -> int:
        """Samples per optimizer step, over every data-parallel rank."""
        return self.micro_batch * self.accumulation * self.devices

    @property
    def ranks(self) -> int:
        """The processes a probe of it launches: every data-parallel rank's tensor-parallel ranks."""
        return self.devices * self.tensor_parallel

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Strategy:
        """From a result or a tuned: section; missing fields take their defaults, wrong types raise."""
        values = {}
        for field in FIELDS.values():
            value = data.get(field.name, field.default)
            if field.type is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{field.name} must be an integer, got {value!r}")
            if field.type is str and not isinstance(value, str):
                raise ValueError(f"{field.name} must be a string, got {value!r}")
            if field.type is bool and not isinstance(value, bool):
                raise ValueError(f"{field.name} must be true or false, got {value!r}")
            values[field.name] = value
        return cls(**values)

    def label(self, without: tuple[str, ...] = (), facts: Facts | None = None) -> str:
        """e.g. "bf16 m=8 k=4 r=2": each field's part but those of the groups named in `without`; with the model's
        facts, counts out of the model's (r=2/12)."""
        parts = (field.label(self, facts or {}) for field in FIELDS.values()
                 if field.label is not None and field.group not in without)
        return " ".join(part for part in parts if part)

    def part(self, group: str, facts: Facts | None = None) -> str:
        """The label's part of one group's fields (a mechanism's): "bf16", "m=8 k=4", "" when off."""
        return self.label(without=tuple({field.group for field in FIELDS.values()} - {group}), facts=facts)

    def with_(self, **changes: Any) -> Strategy:
        return dataclasses.replace(self, **changes)


assert tuple(FIELDS) == tuple(f.name for f in dataclasses.fields(Strategy)), "every field declared once, in order"
