"""What a memory mechanism is, in four small protocols by consumer: its declaration (the spec and the child's
settings), its memory effect (the search's fitted model and the estimate's counted one), its part in the search, and
its runtime hooks in the probe child. Paddle-free: the runtime hooks import Paddle inside themselves.

What a tool's file says of it is the tool's dialect's (dialects/NAME/codec.py); how it is shown, estimated and
checked is the consumer's (render/, estimating/, doctor/, checking/), naming the Strategy's fields."""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from vramtune.core.strategy import Facts, Field
from vramtune.memory.line import Term

if TYPE_CHECKING:
    from vramtune.core.reading import Sections
    from vramtune.core.records import Budget, Device, ProbeResult
    from vramtune.core.strategy import Strategy
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




class Unsupported(Exception):
    """Raised by a runtime hook (or by what it wraps) where the strategy cannot run this model here: the probe is
    `unsupported`, with the message as its reason (a model to_static cannot convert)."""


class Declaration:
    """What a mechanism is: its name, its strategy fields (core/strategy.py declares them), its `vramtune probe` flags,
    its spec keys and what its child hooks need of them."""

    name: str = ""
    fields: tuple[Field, ...] = ()
    options: tuple[Option, ...] = ()

    def read(self, spec: Sections) -> Any:
        """Its settings from the spec's sections (problems recorded on them); None when it has none."""
        return None

    def child_settings(self, settings: Any, budget: Budget) -> Any:
        """What the child needs of its settings (JSON), or None. The budget is given for a mechanism that picks
        what to measure in the child by it (evaluation batches); fit is still judged by the parent."""
        return None


class MemoryEffect:
    """What a mechanism does to memory, shared by the search's fitted model (memory/line.py) and the estimate's counted
    one (memory/state.py): its term in the fitted line and its memory group, what it saves by counted sizes, the
    state a rank counts under it, its activations' factor and the layers it re-runs."""

    term: ClassVar[Term | None] = None  # its term in the fitted line (memory_term), and how it is fitted; None: none
    shares_memory_group = False  # its values within one memory group take the same bytes (fp16 and bf16)

    def memory_term(self, strategy: Strategy) -> float:
        """The feature whose fitted coefficient is this mechanism's memory effect; 0 when off."""
        return 0.0

    def memory_group(self, strategy: Strategy) -> str:
        """Strategies in different groups get separate memory models (fp32 vs AMP)."""
        return ""

    def known_saving(self, strategy: Strategy, counts: dict[str, float]) -> float:
        """Bytes the mechanism saves that follow from counted sizes rather than a fit (counts: weight, gradient
        and optimizer bytes of the unpartitioned model), e.g. sharding divides state by the ranks."""
        return 0.0

    def largest_coefficient(self, per_sample: float, facts: Facts) -> float | None:
        """The most its memory coefficient can be, from the activation bytes per sample measured without it and
        its facts (a prior that places its first probe; None: no bound)."""
        return None

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


class SearchRole:
    """A mechanism in the search: what it costs (the tie rule's weight, its speed bounds and group), what a device
    cannot run, its floor and its own phase's verdict, what it says of the search, and the functions of the roles it
    plays (search/roles.py finds them): whole_batch; alternatives + worth_searching (outer); levels + refine_level
    (an axis); refine."""

    most_cost: float | None = None  # the most throughput it can cost, as a fraction, used in full (a bound, not a
    #                                 measurement: it rules a comparison out before the cost is measured)

    def weight(self, strategy: Strategy) -> int:
        """How much of the mechanism is used, 0 when off: the tie rule prefers less, the speed model charges a
        measured cost per unit of it."""
        return 0

    def unsupported(self, strategy: Strategy, device: Device) -> str | None:
        return None

    def least_cost(self, strategy: Strategy, facts: Facts) -> float:
        """The least it slows the strategy, as a fraction of the per-sample compute (a bound, not a measurement:
        it rules a probe out before the cost is measured); 0 when off or unknown."""
        return 0.0

    def speed_group(self, strategy: Strategy) -> str:
        """Strategies in different groups get separate speed lines (each precision its own)."""
        return ""

    def min_micro_batch(self, settings: Any, facts: Facts) -> tuple[int, str] | None:
        """A floor on the micro-batch that may be chosen, and why."""
        return None

    def judge(self, result: ProbeResult, limit: float) -> str | None:
        """Why a result whose training peak fits does not fit after all (a phase of its own), or None."""
        return None

    def notes(self, search: SearchView) -> list[str]:
        """What the search skips from the start, and why (e.g. AMP on a CPU)."""
        return []

    def suggest(self, search: SearchView) -> list[str]:
        """When nothing fits: what of this mechanism would help."""
        return []

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


class Runtime:
    """A mechanism in the probe child and in `vramtune.runtime` (import Paddle inside): applied in registry order by
    child/preparing.py and child/training.py."""

    def probe_notes(self, strategy: Strategy, device_kind: str) -> list[str]:
        """What a probe of `strategy` on this kind of device runs differently from the path it stands for, in
        words (said with the measurement)."""
        return []

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

    def until_rebuild(self, model: Any, strategy: Strategy, settings: Any) -> Callable[[], bool] | None:
        """For a probe that measures memory only until a block is first rebuilt in backward (the estimate's, where
        the logits set the peak before that): make that moment end the step (by an exception out of backward);
        returns whether it did. None: this mechanism rebuilds nothing there."""
        return None

    def after_measure(self, run: Any, settings: Any) -> Facts:
        """After the measured training steps: a phase of its own (evaluation), measured; returns facts."""
        return {}


class Mechanism(Declaration, MemoryEffect, SearchRole, Runtime):
    """A memory mechanism: its declaration, its memory effect, its part in the search and its runtime hooks. Every hook
    has a default that does nothing, so a mechanism writes only what it changes."""


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
