"""Train exactly what was measured, in your own loop.

    from vramtune import runtime
    plan = runtime.load("model.tuned.yaml")
    # PaddleNLP model: model = LlamaForCausalLM(plan.configure(config))  -- its own recompute settings
    model, optimizer = plan.prepare(model, lambda parameters: paddle.optimizer.AdamW(parameters=parameters))
    for batch in loader:                                    # batches of plan.micro_batch samples
        loss, stepped = plan.step(lambda b: loss_fn(model, b), batch)   # AMP, scaling, accumulation

The probes prepare and train through the same code (child/preparing.py, child/training.py), so every mechanism —
LoRA, precision, loss scaling, accumulation, recompute, data parallel, sharding — is applied as measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import paddle

from vramtune.child.preparing import OptimizerOrFactory, Prepared, configure, prepare
from vramtune.core.records import Budget
from vramtune.core.report import Tuned
from vramtune.plugins import MECHANISMS
from vramtune.spec import load_spec, require_tuned


@dataclass
class Plan:
    tuned: Tuned  # the whole tuned: section (strategy, peak_bytes, budget_bytes, ...)
    settings: dict[str, Any] = field(default_factory=dict)  # mechanism name -> what its child hooks need
    prepared: Prepared | None = None

    @property
    def strategy(self) -> Any:
        return self.tuned.strategy

    @property
    def micro_batch(self) -> int:
        return self.strategy.micro_batch

    @property
    def accumulation(self) -> int:
        return self.strategy.accumulation

    def configure(self, config: Any) -> Any:
        """For a PaddleNLP model, before building it: the settings it reads at construction (recompute
        granularity, no_recompute_layers), as in the probes. Returns the config."""
        return configure(config, self.strategy, self.settings)

    def prepare(self, model: paddle.nn.Layer, optimizer: OptimizerOrFactory) -> tuple[Any, Any]:
        """Apply the mechanisms as the probes did: LoRA and recompute on the model; under AMP O2 its weights cast
        to half in place and the optimizer keeping fp32 master weights; with several ranks, data parallel or
        fleet sharding (run under `python -m paddle.distributed.launch --nproc_per_node N`). `optimizer` may be a
        factory of the parameters to train (required when the plan adds parameters, as LoRA does). Returns the
        model and optimizer to train with."""
        self.prepared = prepare(model, optimizer, self.strategy, self.settings)
        return self.prepared.network, self.prepared.optimizer

    def step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> tuple[paddle.Tensor, bool]:
        """One micro-batch: forward under the tuned precision, backward; the optimizer steps every
        `accumulation` calls. Returns (loss, whether the optimizer stepped)."""
        if self.prepared is None:
            raise RuntimeError("call plan.prepare(model, optimizer) before plan.step(...)")
        return self.prepared.runner.micro_step(loss_fn, batch)


def load(path: str | Path) -> Plan:
    """The plan of a file written by `vramtune apply`."""
    spec = load_spec(path)
    tuned = require_tuned(spec)
    budget = Budget(tuned.budget_bytes or spec.budget or 0, spec.headroom)
    settings = {m.name: child for m in MECHANISMS
                if (child := m.child_settings(spec.settings.get(m.name), budget)) is not None}
    return Plan(tuned, settings)
