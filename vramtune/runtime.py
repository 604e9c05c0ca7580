"""Train exactly what was measured, in your own loop.

    from vramtune import runtime
    plan = runtime.load("model.tuned.yaml")
    model, optimizer = plan.prepare(model, optimizer)      # wraps the recomputed blocks
    for batch in loader:                                    # batches of plan.micro_batch samples
        loss, stepped = plan.step(lambda b: loss_fn(model, b), batch)   # AMP, scaling, accumulation

The same `StepRunner` runs the probes, so precision, loss scaling, accumulation and recompute are identical.
Note: recomputed blocks sit inside a wrapper, so their state_dict keys gain an `inner.` segment; call
`plan.prepare` after loading a checkpoint, or save from a model that was not prepared.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import paddle

from vramtune.spec import load_spec, require_tuned
from vramtune.strategy import Strategy
from vramtune.training import StepRunner, apply_recompute


@dataclass
class Plan:
    strategy: Strategy
    recompute_path: str | None = None  # the spec's model.recompute_blocks (None: detected as in the probes)
    tuned: dict[str, Any] = field(default_factory=dict)  # the whole tuned: section (peak_bytes, budget_bytes, ...)
    runner: StepRunner | None = None

    @property
    def micro_batch(self) -> int:
        return self.strategy.micro_batch

    @property
    def accumulation(self) -> int:
        return self.strategy.accumulation

    def prepare(self, model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer):
        """Apply recompute to the model and bind the optimizer; returns (model, optimizer)."""
        if self.strategy.recompute_layers:
            apply_recompute(model, self.strategy.recompute_layers, self.recompute_path)
        self.runner = StepRunner(model, optimizer, self.strategy)
        return model, optimizer

    def step(self, loss_fn: Callable[[Any], paddle.Tensor], batch: Any) -> tuple[paddle.Tensor, bool]:
        """One micro-batch: forward under the tuned precision, backward; the optimizer steps every
        `accumulation` calls. Returns (loss, whether the optimizer stepped)."""
        if self.runner is None:
            raise RuntimeError("call plan.prepare(model, optimizer) before plan.step(...)")
        return self.runner.micro_step(loss_fn, batch)


def load(path: str | Path) -> Plan:
    """The plan of a file written by `vramtune apply`."""
    spec = load_spec(path)
    tuned = require_tuned(spec)
    return Plan(Strategy.from_json(tuned), spec.model.recompute_blocks, dict(tuned))
