"""Train exactly what was measured, in your own loop.

    from vramtune import runtime
    plan = runtime.load("model.tuned.yaml")
    # PaddleNLP model: model = LlamaForCausalLM(plan.configure(config))  -- its own recompute settings
    model, optimizer = plan.prepare(model, optimizer)      # wraps the recomputed blocks
    for batch in loader:                                    # batches of plan.micro_batch samples
        loss, stepped = plan.step(lambda b: loss_fn(model, b), batch)   # AMP, scaling, accumulation

The same `StepRunner` and mechanisms run the probes, so precision, loss scaling, accumulation and recompute are
identical. Note: recomputed blocks sit inside a wrapper, so their state_dict keys gain an `inner.` segment; call
`plan.prepare` after loading a checkpoint, or save from a model that was not prepared.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import paddle

from vramtune.checking import tuned_strategy
from vramtune.child.training import StepRunner
from vramtune.mechanisms import MECHANISMS
from vramtune.spec import load_spec


@dataclass
class Plan:
    strategy: Any  # vramtune.strategy.Strategy
    block_path: str | None = None  # the spec's model.block_path (None: detected as in the probes)
    tuned: dict[str, Any] = field(default_factory=dict)  # the whole tuned: section (peak_bytes, budget_bytes, ...)
    runner: StepRunner | None = None

    @property
    def micro_batch(self) -> int:
        return self.strategy.micro_batch

    @property
    def accumulation(self) -> int:
        return self.strategy.accumulation

    def configure(self, config: Any) -> Any:
        """For a PaddleNLP model, before building it: the recompute settings it reads at construction
        (recompute_granularity, no_recompute_layers), as in the probes. Returns the config."""
        for mechanism in MECHANISMS:
            mechanism.configure_model(config, self.strategy, self.block_path)
        return config

    def prepare(self, model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer):
        """Apply the mechanisms to the model (recompute; under AMP O2 its weights are cast to half in place and the
        optimizer keeps fp32 master weights) and, with several ranks, set up data parallel or fleet sharding as
        the probes did (run the script under `python -m paddle.distributed.launch --nproc_per_node N`); returns
        the (possibly wrapped) model and optimizer to train with."""
        for mechanism in MECHANISMS:
            mechanism.prepare_model(model, self.strategy, self.block_path)
        for mechanism in MECHANISMS:
            model, optimizer = mechanism.prepare_training(model, optimizer, self.strategy)
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
    return Plan(tuned_strategy(spec), spec.block_path, dict(spec.tuned))
