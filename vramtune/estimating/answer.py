"""`vramtune estimate` for a model known by its config.json (a model folder, the file, or a PaddleFormers config
naming the folder): no probe, nothing built. The state is counted from the sizes (architecture.py), the activations
come from the analytic model (analytic.py), and every strategy a PaddleFormers run could take is predicted per
rank: fine-tuning (LoRA, full) x precision (fp32, AMP O1, O2) x recompute (none, a quarter, half, three quarters,
every layer) x sharding stage (with several devices) x micro-batch; with several devices also every tensor,
pipeline and expert parallel layout of them, per rank and pipeline stage (layouts.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from vramtune.core.records import Budget, ProbeResult
from vramtune.core.report import Tuned
from vramtune.core.strategy import AMP_DTYPES, PURE, SHARDING_STAGES, Facts, Strategy
from vramtune.dialects.paddleformers.codec import FORMERS_DEFAULTS, batch_keys, formers_facts, to_formers
from vramtune.doctor.calibration import doctor_factors
from vramtune.estimating import vl as vision
from vramtune.estimating.factors import calibrated
from vramtune.estimating.layouts import Layouts, search
from vramtune.estimating.rows import counted_facts, predicted_best, recompute_levels
from vramtune.memory.analytic import FLASH, activations
from vramtune.memory.architecture import Architecture, architecture, count
from vramtune.memory.parallel import Layout
from vramtune.memory.state import Counts, Factors, Given, Row, row
from vramtune.memory.vision import VL_TYPES
from vramtune.plugins import MECHANISMS

FINE_TUNINGS = ("LoRA", "full")
DATA_PARALLEL_BUFFERS = 1.0  # paddle.DataParallel's fused gradient buffers over the gradients (measured x1.00 on CPU)


@dataclass
class Question:
    """What the user asks: a model's config.json and how PaddleFormers would train it (its defaults)."""

    name: str
    config: dict[str, Any]
    seq_len: int = 4096  # max_seq_len
    batch: int = 8  # per_device_train_batch_size x gradient_accumulation_steps
    fine_tuning: str | None = None  # LoRA or full; None: both are answered, neither asked
    lora_rank: int = 8
    compute_type: str = FORMERS_DEFAULTS["compute_type"]
    master_grad: bool = FORMERS_DEFAULTS["amp_master_grad"]
    attention: str = "flashmask"  # _attn_implementation
    devices: int = 1
    nodes: int = 1  # the devices' nodes (tensor parallel within one)
    optimizer: str = "adamw"
    notes: list[str] = field(default_factory=list)  # what reading the question found (the sequence length's source)
    layout: Layout | None = None  # the hybrid-parallel layout a file states (its parallel keys)
    images: vision.Images | None = None  # a vision-language model's: the cap, packing, freeze_config


@dataclass
class Answer:
    question: Question
    arch: Architecture
    budget: Budget
    counts: dict[str, Counts]  # per fine-tuning
    rows: dict[str, list[Row]]  # per fine-tuning
    active: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    factors: Factors = field(default_factory=Factors)
    layouts: Layouts | None = None  # with several devices: the hybrid-parallel layouts
    vision: dict[str, Any] | None = None  # a vision-language model's parts and images (estimating/vl.py)

    def best(self, fine_tuning: str) -> Row | None:
        return predicted_best(self.rows[fine_tuning])

    @property
    def fits(self) -> bool:
        """The fine-tuning asked (or either, when none was) has a strategy predicted to fit."""
        asked = [self.question.fine_tuning] if self.question.fine_tuning else list(FINE_TUNINGS)
        return any(self.best(f) for f in asked) or bool(self.layouts and self.layouts.best)

    def to_json(self) -> dict[str, Any]:
        q = self.question
        return {"model": q.name, "model_type": self.arch.model_type, "layers": self.arch.layers,
                "seq_len": q.seq_len, "batch": q.batch,
                "devices": q.devices, "budget_bytes": self.budget.bytes, "limit_bytes": int(self.budget.limit),
                "attention": q.attention, "asked": q.fine_tuning, "active_params": self.active,
                "seconds": round(self.seconds, 3), "notes": self.notes, "factors": vars(self.factors),
                **({"vision": self.vision} if self.vision else {}),
                **{f: {"counts": vars(self.counts[f]), "rows": [r.to_json() for r in self.rows[f]],
                       "best": ({**b.to_json(), "keys": file_keys(b, f, self.counts[f], self.arch)}
                                if (b := self.best(f)) else None)} for f in FINE_TUNINGS},
                "layouts": self.layouts.to_json() if self.layouts else None}


def strategies(question: Question, arch: Architecture, fine_tuning: str, facts: Facts) -> list[Strategy]:
    """Every strategy a PaddleFormers run could take on the question's devices, in the rows' order: fp32, and the
    question's compute_type at O1 and O2 when it is a half type; within each, every sharding stage with several
    devices (none with one); within each, the layers the model's code can recompute (`model_facts`): every layer or
    none in PaddleFormers' own code, where a layer recomputes only when its input needs a gradient (under LoRA never
    the first: the embeddings are frozen), a quarter, half, three quarters too in the paddlefleet models; the
    micro-batches of the batch innermost."""
    half = question.compute_type
    precisions = ["fp32", half, f"{half}{PURE}"] if half in AMP_DTYPES else ["fp32"]
    stages = SHARDING_STAGES if question.devices > 1 else (0,)
    if facts["recompute_options"]["partial"]:
        levels = recompute_levels(arch.layers)
    else:
        levels = [0, arch.layers - 1 if fine_tuning == "LoRA" else arch.layers]
    return [Strategy(precision=precision, devices=question.devices, sharding_stage=stage, recomputed_blocks=blocks,
                     micro_batch=micro, accumulation=question.batch // micro)
            for precision in precisions for stage in stages for blocks in levels
            for micro in micro_batches(question.batch)]


def model_facts(counts: Counts, arch: Architecture) -> Facts:
    """What the estimate knows of the model without a probe: the counted facts, and what PaddleFormers' code does
    of its model_type (recompute: whether its code recomputes the first N layers)."""
    return {**counted_facts(counts), **formers_facts(arch.model_type)}


def file_keys(best: Row, fine_tuning: str, counts: Counts, arch: Architecture) -> dict[str, Any]:
    """The PaddleFormers keys that train the way a row predicts: the batch first, then what the dialect's
    `to_formers` writes for the row on a GPU, told what the estimate knows of the model (`model_facts`)."""
    tuned = Tuned(best.strategy, model_facts(counts, arch), device_kind="gpu")
    return {"fine_tuning": "LoRA" if fine_tuning == "LoRA" else "Full", **batch_keys(tuned),
            **to_formers({}, tuned)}


def installed_paddle() -> str:
    """The installed Paddle's version, asked of its distribution (the parent never imports Paddle); "" if none."""
    for name in ("paddlepaddle-gpu", "paddlepaddle"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ""


def micro_batches(batch: int) -> list[int]:
    return [m for m in (2**i for i in range(batch.bit_length())) if batch % m == 0]


def answer(question: Question, card_bytes: int, headroom: float = 0.05,
           calibration: list[ProbeResult] | None = None, budget_bytes: int | None = None) -> Answer:
    """Every strategy's per-rank peak within the budget (default: the card), with factors calibrated from a GPU
    run's probes of this model (the fine-tuning asked; LoRA for a bare model), else a saved doctor run's on such a
    card, else the stated ones."""
    start = time.monotonic()
    flash = question.attention in FLASH
    vl = vision.asked(question.config, question.images)
    arch = vl.vl.text if vl else architecture(question.config)
    budget = Budget(budget_bytes or card_bytes, headroom)
    counts, fits = {}, {}
    for fine_tuning in FINE_TUNINGS:
        rank = question.lora_rank if fine_tuning == "LoRA" else None
        counted = vl.counted(rank) if vl else count(arch, rank)
        fits[fine_tuning] = vl.fit(rank, question.seq_len, flash) if vl else activations(arch, question.seq_len, flash)
        counts[fine_tuning] = Counts(counted.params, counted.trainable, matmul=counted.matmul, layers=arch.layers,
                                     shape={"hidden_size": arch.hidden, "num_hidden_layers": arch.layers})
    asked = question.fine_tuning or "LoRA"
    factors = (calibrated(calibration, counts[asked], fits[asked]) if calibration
               else doctor_factors(card_bytes, installed_paddle()) or Factors())
    given = Given(question.optimizer, question.master_grad, DATA_PARALLEL_BUFFERS)
    rows: dict[str, list[Row]] = {}
    for fine_tuning in FINE_TUNINGS:
        rows[fine_tuning] = []
        for strategy in strategies(question, arch, fine_tuning, model_facts(counts[fine_tuning], arch)):
            predicted = row(MECHANISMS, counts[fine_tuning], fits[fine_tuning], factors, strategy, given, gpu=True)
            predicted.fits = budget.fits(predicted.reserved)
            rows[fine_tuning].append(predicted)
    active = vl.counted(None).active if vl else count(arch).active
    notes = _notes(question, arch, factors) + (vl.notes(question.seq_len, question.lora_rank) if vl else [])
    layouts = _layouts(question, arch, given, factors, budget) if question.devices > 1 and not vl else None
    if vl and question.devices > 1:
        notes.append("vision-language: data parallel and sharding only (tensor, pipeline and expert parallel layouts "
                     "are estimated for text decoders in this version)")
    return Answer(question, arch, budget, counts, rows, active, time.monotonic() - start, notes, factors=factors,
                  layouts=layouts, vision=vl.to_json(question.seq_len, question.lora_rank) if vl else None)


def _layouts(question: Question, arch: Architecture, given: Given, factors: Factors, budget: Budget) -> Layouts:
    """The hybrid-parallel layouts of the question's devices, for the fine-tuning asked (full for a bare model) at
    the compute type's O2 (fp32 when it is fp32)."""
    half = question.compute_type
    lora = question.lora_rank if question.fine_tuning == "LoRA" else None
    return search(arch, question.seq_len, question.attention in FLASH, question.batch, question.devices,
                  f"{half}{PURE}" if half in AMP_DTYPES else "fp32", given, factors, budget, lora, question.layout,
                  question.nodes)


def _notes(question: Question, arch: Architecture, factors: Factors) -> list[str]:
    flash = question.attention in FLASH
    notes = [*question.notes,
        "counted (exact, from config.json as PaddleFormers builds the model): every parameter"
        + (", every expert resident" if arch.moe else "") + f"; LoRA r={question.lora_rank} on PaddleFormers' "
        "target modules; bytes per parameter of each precision (O2: fp32 master weights and AdamW moments"
        + (", fp32 gradients with amp_master_grad" if question.master_grad else "") + ")",
        "measured (CPU, fp32, PaddleFormers' Llama and ERNIE-4.5): the activation coefficients per token, layer and "
        "width, and of the logits" + (f"; only the top-{arch.moe.top_k} routed experts hold activations"
                                      if arch.moe else ""),
        f"assumed ({factors.source}): AMP O1 activations x{factors.o1_activations:g} of fp32's, O2 "
        f"x{factors.o2_activations:g}, the GPU allocator's reserve +{factors.fragmentation:.0%}"
        + (f", {question.attention} attention keeps no [s, s] tensor" if flash else "")
        + (", each routed copy of a token's input and output in an MoE layer" if arch.moe else "")
        + (f", data parallel's gradient buffers x{DATA_PARALLEL_BUFFERS:.2f} of the gradients (no sharding)"
           if question.devices > 1 else ""),
    ]
    if arch.fused is False and arch.model_type not in ("llama",):
        notes.append(f"{arch.model_type}: the coefficients of PaddleFormers' Llama (separate projections) are assumed")
    if arch.model_type.startswith(("qwen", "glm")) and arch.model_type not in VL_TYPES:
        notes.append(f"{arch.model_type}: the coefficients of PaddleFormers' ERNIE-4.5 (fused projections) are "
                     "assumed (its code needs paddlefleet, not on PyPI: it cannot be built here)")
    return notes
