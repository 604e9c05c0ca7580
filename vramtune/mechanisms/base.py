"""What a memory mechanism declares. Paddle-free: the child-side hooks import Paddle inside themselves.

A mechanism owns everything about itself, and nothing outside its module names it:
- its strategy fields (with their `vramtune measure` flags) and the facts it learns about a model (result keys);
- its spec keys (YAML: `read`; a PaddleNLP arguments file: `from_arguments`, and back: `to_arguments`), its
  `vramtune probe` flags, and what the child needs of its settings (`child_settings`);
- what each tool's config says of it beside the spec: a PaddleNLP arguments file, a PaddleFormers config, the keys the
  kits' configs share (`from_kit` ... `to_kit`);
- what the estimate counts of it, how `measure`, `check` and `doctor` show and check it;
- its part in judging and searching: label, tie weight, what a device cannot run, its memory term and group, and
  the search functions of the roles the ladder's data gives it (`search/roles.py`);
- its child-side hooks, which `child/preparing.py` applies in registry order.
Every hook has a default that does nothing, so a mechanism writes only what it changes.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, NamedTuple, Protocol

from vramtune.core.strategy import Facts, Field

if TYPE_CHECKING:
    from vramtune.core.reading import Section, Sections
    from vramtune.core.records import Budget, Device, ProbeResult
    from vramtune.core.report import Tuned
    from vramtune.core.strategy import Strategy
    from vramtune.doctor.base import Check
    from vramtune.memory.architecture import Architecture
    from vramtune.memory.state import Counts, Factors, Given


@dataclass(frozen=True)
class Option:
    """A `vramtune probe` flag that overrides a spec key (e.g. --no-recompute -> search.recompute: off)."""

    param: str
    flag: str
    type: Any
    default: Any
    help: str
    overrides: Callable[[Any], dict[str, Any]]
    multiple: bool = False
    choices: tuple[str, ...] | None = None




class Launch(NamedTuple):
    """A probe run under a launcher: its command, its environment, and how many ranks write a result."""

    argv: list[str]
    env: dict[str, str]
    ranks: int  # each rank writes its own result (OUT.rankN)


class Mechanism:
    name: str = ""
    fields: tuple[Field, ...] = ()  # its strategy fields (core/strategy.py declares them)
    options: tuple[Option, ...] = ()
    nonnegative_term = True  # the fitted memory coefficient cannot be negative
    soft_term = False  # taken as 0 while too few probes pin the base line down
    shares_memory_group = False  # its values within one memory group take the same bytes (fp16 and bf16)
    argument_defaults: ClassVar[dict[str, Any]] = {}  # llm-script keys its to_arguments writes -> what a parser
    #                                   without them (TrainingArguments alone) leaves: writing nothing says the same
    formers_keys: ClassVar[tuple[str, ...]] = ()  # a PaddleFormers config's keys the search decides for it: a
    #                                             probe leaves the file's values out (its strategy sets them)
    formers_defaults: ClassVar[dict[str, Any]] = {}  # the PaddleFormers keys its from_formers reads -> what
    #                                                    PaddleFormers takes when a config leaves them out
    most_cost: float | None = None  # the most throughput it can cost, as a fraction, used in full (a bound, not a
    #                                 measurement: it rules a comparison out before the cost is measured)
    state_parts: ClassVar[dict[str, str]] = {}  # the parts its `counted_state` adds to a rank's state -> their words
    preferred: ClassVar[tuple[int, str] | None] = None  # its place in the estimate's predicted best (the lower decides
    #                                                     first; see `preference`) and what it prefers, in words

    # -- the spec (Paddle-free) ----------------------------------------------------------------------------
    def read(self, spec: Sections) -> Any:
        """Its settings from the spec's sections (problems recorded on them); None when it has none."""
        return None

    def fixed(self, settings: Any) -> dict[str, Any]:
        """Strategy fields the user fixes for the whole run rather than the search exploring (e.g. devices)."""
        return {}

    def from_arguments(self, arguments: Section) -> dict[str, Any]:
        """The keys of a PaddleNLP arguments file it reads, as dotted spec keys (the file becomes a spec)."""
        return {}

    def to_arguments(self, tuned: Tuned) -> tuple[dict[str, Any], list[str]]:
        """PaddleNLP keys for the tuned values (TrainingArguments, or the llm scripts' ModelArgument), and warnings
        for what does not map."""
        return {}, []

    def from_formers(self, config: Section) -> dict[str, Any]:
        """The keys of a PaddleFormers 1.x config it reads (the same meanings as its PaddleNLP keys, under that tool's
        names), as dotted spec keys; problems recorded on the section, by the file's own key names."""
        return {}

    def to_formers(self, config: dict[str, Any], tuned: Tuned) -> dict[str, Any]:
        """The keys of the user's PaddleFormers config that say its tuned values, and their values
        (`roundtrip.DELETE` removes a key); `apply` writes those that differ from the file."""
        return {}

    def formers_on_cpu(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Its GPU-only settings in a PaddleFormers config and the CPU equivalents a probe on CPU runs instead (said
        in the report, never written back)."""
        return {}

    def inexpressible(self, tuned: Tuned, accepted: frozenset[str]) -> str | None:
        """Why a PaddleNLP parser whose fields are `accepted` cannot be made to train the tuned values as measured,
        or None. `apply` then exports the nearest measured configuration it can express, and says so."""
        return None

    def expressible_neighbour(self, tuned: Tuned) -> Strategy | None:
        """A configuration next to an inexpressible one that PaddleNLP can train, for `apply` to measure when no
        saved probe can stand in for it; None when there is none."""
        return None

    def outdated(self, tuned: dict[str, Any]) -> str | None:
        """Why a `tuned:` section an older vramtune wrote is not read (a field of its renamed since), or None."""
        return None

    def child_settings(self, settings: Any, budget: Budget) -> Any:
        """What the child needs of its settings (JSON), or None. The budget is given for a mechanism that picks
        what to measure in the child by it (evaluation batches); fit is still judged by the parent."""
        return None

    # -- judging and reporting (Paddle-free) -------------------------------------------------------------
    def weight(self, strategy: Strategy) -> int:
        """How much of the mechanism is used, 0 when off: the tie rule prefers less, the speed model charges a
        measured cost per unit of it."""
        return 0

    def unsupported(self, strategy: Strategy, device: Device) -> str | None:
        return None

    def memory_term(self, strategy: Strategy) -> float:
        """The feature whose fitted coefficient is this mechanism's memory effect; 0 when off."""
        return 0.0

    def largest_coefficient(self, per_sample: float, facts: Facts) -> float | None:
        """The most its memory coefficient can be, from the activation bytes per sample measured without it and
        its facts (a prior that places its first probe; None: no bound)."""
        return None

    def activation_scale(self, strategy: Strategy) -> float | None:
        """Its activation bytes over those with it off, where it changes them by a stated factor (AMP's half
        activations): a prior for a memory group not yet measured, from another's measured activations."""
        return None

    def least_cost(self, strategy: Strategy, facts: Facts) -> float:
        """The least it slows the strategy, as a fraction of the per-sample compute (a bound, not a measurement:
        it rules a probe out before the cost is measured); 0 when off or unknown."""
        return 0.0

    def known_saving(self, strategy: Strategy, counts: dict[str, float]) -> float:
        """Bytes the mechanism saves that follow from counted sizes rather than a fit (counts: weight, gradient
        and optimizer bytes of the unpartitioned model), e.g. sharding divides state by the ranks."""
        return 0.0

    def memory_group(self, strategy: Strategy) -> str:
        """Strategies in different groups get separate memory models (fp32 vs AMP)."""
        return ""

    def speed_group(self, strategy: Strategy) -> str:
        """Strategies in different groups get separate speed lines (each precision its own)."""
        return ""

    def min_micro_batch(self, settings: Any, facts: Facts) -> tuple[int, str] | None:
        """A floor on the micro-batch that may be chosen, and why."""
        return None

    def judge(self, result: ProbeResult, limit: float) -> str | None:
        """Why a result whose training peak fits does not fit after all (a phase of its own), or None."""
        return None

    def phrase(self, strategy: Strategy, facts: Facts) -> tuple[str, str] | None:
        """Its words in the one-line answer ("chosen: ..."), as (place, words): "what" before the batch, "batch"
        inside it (joined with " x "), "memory" after it; None when it adds nothing."""
        return None

    def measured_lines(self, facts: Facts) -> list[str]:
        """What `vramtune measure` says of its facts about the model (e.g. the repeated blocks found)."""
        return []

    def describe(self, result: ProbeResult) -> list[str]:
        """Lines about a chosen result for the report."""
        return []

    def notes(self, search: SearchView) -> list[str]:
        """What the search skips from the start, and why (e.g. AMP on a CPU)."""
        return []

    def suggest(self, search: SearchView) -> list[str]:
        """When nothing fits: what of this mechanism would help."""
        return []

    # -- `vramtune estimate` (Paddle-free): what the estimate counts and shows of it ------------------------
    def counted_state(self, state: dict[str, int], strategy: Strategy, counts: Counts, given: Given
                      ) -> dict[str, int]:
        """One rank's counted state (bytes by part: weights, gradients, optimizer_state, and the parts of its own in
        `state_parts`) as it changes it: applied in registry order to fp32's unpartitioned state (AMP's bytes per
        parameter, then sharding's partitions)."""
        return state

    def activation_factor(self, strategy: Strategy, factors: Factors) -> float:
        """Its activation bytes over those with it off, by the estimate's factors (stated or calibrated from a GPU's
        probes); the CPU measures fp32 activations."""
        return 1.0

    def rerun_layers(self, strategy: Strategy) -> int:
        """The model's layers whose activations backward rebuilds rather than keeps (recompute's blocks): the
        estimate's activation model holds only their inputs."""
        return 0

    def preference(self, strategy: Strategy) -> list[tuple[int, Any]]:
        """Its criteria in the estimate's predicted best (speed is not estimated): (rank, key) pairs, the lower rank
        deciding first, the lower key preferred."""
        return []

    def counted_facts(self, counts: Counts) -> Facts:
        """Its facts about a model as the estimate knows them from the counts (no probe ran), for its `column` and
        `phrase` (recompute: the counted layers as its blocks)."""
        return {}

    def column(self, strategy: Strategy, facts: Facts) -> tuple[str, str] | None:
        """Its column in the estimate's table of strategies: (heading, cell); None when it has none."""
        return None

    def estimate_choices(self, question: Any, arch: Architecture, fine_tuning: str
                         ) -> tuple[int, list[dict[str, Any]]] | None:
        """The field values it explores in a config.json estimate (`vramtune estimate MODEL_FOLDER`), from the
        question (an `estimating.answer.Question`: compute_type, devices), the model's sizes and the rows' fine-tuning,
        and its place in the rows' nesting (the lowest outermost; the micro-batch innermost); None: its fields keep
        their defaults."""
        return None

    def spec_estimate_choices(self, settings: Any, context: Any) -> tuple[int, list[dict[str, Any]]] | None:
        """The field values it explores in a spec's estimate (`vramtune estimate SPEC`), from its settings and the
        context (an `estimating.run.SpecContext`: the devices, the model's counts and the activation fit), and its
        place in the rows' nesting as in `estimate_choices`; None: its fields keep their defaults."""
        return None

    def estimate_notes(self, question: Any) -> dict[str, str]:
        """What the config.json estimate's notes say of it for the question, by note: "counted" (what its counted
        state counts) and "assumed" (what it takes as given), each added at the end of its note."""
        return {}

    def spec_estimate_notes(self, settings: Any, context: Any) -> dict[str, str]:
        """What a spec's estimate says of it, by its settings and the context (as `spec_estimate_choices`'s): "measured"
        (added to what the CPU probes measured) and "alone" (a note of its own, after the others)."""
        return {}

    def formers_facts(self, model_type: str) -> Facts:
        """Its facts about a PaddleFormers model known by its model_type alone (no probe ran), for its `to_formers`
        in the estimate's predicted best (recompute: whether the model's code recomputes the first N layers)."""
        return {}

    def file_counts(self, layers: int, model_type: str) -> tuple[Facts, dict[str, tuple[Any, ...]]]:
        """What a tool's file may state of its count fields, for a model of these layers and model_type (a
        PaddleFormers model's config.json; 0 and "" where unknown; no probe ran): its facts as a probe records them,
        for its writer, and each count field's values other than the default (recompute: every layer, or 1..L where
        the model recomputes the first N; sharding: every stage). `check` renders them through apply's writer to
        read the file's strategy (stated.py). ({}, {}): none."""
        return {}, {}

    # -- the kits' configs (dialects/kits: what PaddleClas's and PaddleOCR's share; Paddle-free) -----------
    def from_kit(self, config: dict[str, Any]) -> dict[str, Any]:
        """The spec's search keys for it from a kit's config (overrides applied), by the keys the kits share: "off"
        where a kit's config cannot say it. A kit's own keys (its AMP section) are its dialect's, by `kit_terms`."""
        return {}

    def kit_choices(self, half_dtypes: tuple[str, ...]) -> list[str]:
        """Its values a kit's config can say where the kit has AMP keys for these dtypes (Paddle's names: float16,
        bfloat16), least memory first; [] when it has none."""
        return []

    def kit_phase(self, batch: int) -> dict[str, Any]:
        """The spec's train keys for a kit's config that evaluates at `batch` (the loss only: the kits decode on the
        host); {} when it is not that phase."""
        return {}

    def kit_terms(self, strategy: Strategy, facts: Facts) -> dict[str, Any]:
        """Its tuned values in the terms the kits' dialects write into their own keys: Paddle's API names (AMP's
        amp_level O0/O1/O2 and amp_dtype float32/float16/bfloat16) and what the probes found (eval_batch)."""
        return {}

    def to_kit(self, tuned: Tuned) -> dict[str, Any]:
        """The keys the kits share (dotted) that say its tuned values."""
        return {}

    # -- `vramtune doctor` (Paddle-free) ------------------------------------------------------------------
    def doctor_checks(self) -> tuple[Check, ...]:
        """The checks `vramtune doctor` runs of what it assumes of Paddle on the user's device (AMP's casts,
        recompute's saving, the ranks), in registry order after the device's own; each a `doctor.base.Check` in its
        own folder, imported here and importing Paddle only in its `measure`."""
        return ()

    def device_words(self, device: Device) -> str | None:
        """What the doctor's device line says of it on a GPU (AMP: the precisions the card cannot run, or that it
        runs them all); None: nothing."""
        return None

    # -- `vramtune check` (Paddle-free) -------------------------------------------------------------------
    def smoke(self, strategy: Strategy) -> dict[str, Any]:
        """Its fields for the short CPU smoke probe `check` runs without the tuned device (it proves the step still
        trains, not the memory); {} keeps them as tuned."""
        return {}

    def on_ranks(self, strategy: Strategy, devices: int) -> tuple[dict[str, Any], list[str]]:
        """Its fields when `check --devices N` re-measures on another number of ranks, and what that changes in the
        verdict (notes)."""
        return {}, []

    # -- search roles (called for the mechanisms the ladder's data names in each role) -------------------
    def whole_batch(self, base: Strategy, search: SearchView) -> None:
        """Role whole_batch: probe its alternatives at the whole batch (before accumulation)."""

    def alternatives(self, base: Strategy, search: SearchView) -> Iterable[dict[str, Any]]:
        """Role outer: its settings to search in depth, in order (lazily: later ones may depend on results)."""
        return [{}]

    def worth_searching(self, candidate: Strategy, search: SearchView) -> bool:
        """Role outer: whether the candidate could beat what was measured so far."""
        return True

    def levels(self, plain: Strategy, search: SearchView) -> list[Strategy]:
        """Role axis: its settings at one micro-batch, by increasing memory (the last: off)."""
        return []

    def refine_level(self, found: Strategy, search: SearchView) -> ProbeResult:
        """Role axis: the best of the cheaper variants of a level found to fit (e.g. recompute granularities)."""
        return search.results[found]

    def refine(self, best: ProbeResult, search: SearchView) -> None:
        """Role refine: probe variants of the best configuration (kept by the choice only if faster)."""

    # -- child side (import Paddle inside) ---------------------------------------------------------------
    def device_limits(self, kind: str, index: int) -> dict[str, str]:
        """When the child describes the device (kind cpu or gpu, the GPU's index): its values this device
        cannot run, and why (AMP on a CPU); they become `Device.amp_unsupported`."""
        return {}

    def configure_model(self, config: Any, strategy: Strategy, settings: Any) -> None:
        """Before the model is built: set what a model reads from its configuration at construction (PaddleNLP's
        recompute granularity and layers). Only sources with such a configuration call it."""

    def prepare_model(self, model: Any, strategy: Strategy, settings: Any) -> tuple[Any, Facts]:
        """Change the model before its optimizer exists (LoRA, recompute wrappers); returns the model to train
        (perhaps a new wrapper) and the facts learned."""
        return model, {}

    def prepare_training(self, model: Any, optimizer: Any, strategy: Strategy, settings: Any) -> tuple[Any, Any]:
        """Once the optimizer exists: wrap model and optimizer (AMP O2, data parallel, sharding, to_static)."""
        return model, optimizer

    def forward_context(self, strategy: Strategy, settings: Any) -> contextlib.AbstractContextManager:
        """The context every forward runs in (AMP's auto_cast)."""
        return contextlib.nullcontext()

    def scaler(self, scaler: Any, strategy: Strategy, settings: Any) -> Any:
        """The loss scaler as this mechanism needs it: made (fp16) or wrapped (sharding agrees across ranks)."""
        return scaler

    def failed_first_step(self, strategy: Strategy, error: str) -> str | None:
        """Why a failure in the very first training step means this mechanism cannot run the model (the probe
        is then `unsupported`, e.g. a model to_static cannot convert), or None."""
        return None

    def until_rebuild(self, model: Any, strategy: Strategy, settings: Any) -> Callable[[], bool] | None:
        """For a probe that measures memory only until a block is first rebuilt in backward (the estimate's, where
        the logits set the peak before that): make that moment end the step (by an exception out of backward);
        returns whether it did. None: this mechanism rebuilds nothing there."""
        return None

    def after_measure(self, run: Any, settings: Any) -> Facts:
        """After the measured training steps: a phase of its own (evaluation), measured; returns facts."""
        return {}

    def launcher(self, strategy: Strategy, device: Device, arguments: list[str], env: dict[str, str]
                 ) -> Launch | None:
        """The probe run under a launcher (several ranks): the command for the worker's arguments, its
        environment, and how many ranks write a result; None to run the worker as it is."""
        return None


# == The search as the mechanisms see it (issue 35) ==================================================================
# What a mechanism's search-role functions (whole_batch, alternatives, worth_searching, levels, refine_level, refine)
# and its notes / suggest may read and do of the search: exactly the members they use. search.ladder.Tuner satisfies
# it; a mechanism imports nothing of search/.


class SearchProblemView(Protocol):
    """What a mechanism reads of the search's problem."""

    @property
    def micro_batches(self) -> list[int]:
        """The candidates that reach the target exactly, largest first."""
        ...


class SearchView(Protocol):
    """The search, as a mechanism's search functions are given it."""

    @property
    def problem(self) -> SearchProblemView: ...

    @property
    def base(self) -> Strategy:
        """Every mechanism off, the user's fixed fields (ranks) set."""
        ...

    @property
    def limit(self) -> float:
        """The bytes a probe may use and fit."""
        ...

    @property
    def floor(self) -> int:
        """The smallest micro-batch that may be chosen."""
        ...

    @property
    def facts(self) -> Facts:
        """What the probes learned about the model."""
        ...

    @property
    def results(self) -> Mapping[Strategy, ProbeResult]:
        """Every probe so far, in order."""
        ...

    def settings(self, mechanism: str) -> Any:
        """The mechanism's settings from the spec."""
        ...

    def note(self, text: str) -> None: ...

    def unsupported(self, strategy: Strategy) -> str | None:
        """Why the device cannot run the strategy, or None."""
        ...

    def sized(self, strategy: Strategy, micro_batch: int) -> Strategy:
        """The strategy reaching the target batch with this micro-batch."""
        ...

    def without_axes(self, strategy: Strategy) -> Strategy:
        """The strategy with every axis (recompute) off."""
        ...

    def fitting_micro_batches(self, candidate: Strategy, varying: tuple[str, ...] = ()) -> list[int]:
        """Micro-batches measured to fit with the candidate's settings (but `varying`), every axis off."""
        ...

    def probe(self, rung: str, strategy: Strategy) -> ProbeResult:
        """The strategy's result: measured once, or ruled out unmeasured where predicted not to fit."""
        ...

    def predict(self, strategy: Strategy) -> float | None:
        """The bytes the strategy is predicted to take, or None."""
        ...

    def could_win(self, mechanism: Mechanism, candidate: Strategy) -> bool:
        """Whether searching the candidate's setting of `mechanism` in depth can beat the best so far."""
        ...
