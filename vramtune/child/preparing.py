"""Applying the mechanisms to a model, for the probe worker and `vramtune.runtime` alike, in one wrap order: the
registry's (mechanisms/__init__.py). configure (before the model is built) -> prepare_model (LoRA, recompute
wrappers) -> the optimizer, made over the prepared model's parameters -> prepare_training (AMP O2's decorate,
then data parallel or sharding, then to_static) -> a StepRunner with the mechanisms' forward contexts and scaler."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

import paddle

from vramtune.child.training import StepRunner
from vramtune.core.strategy import Facts
from vramtune.plugins import MECHANISMS

OptimizerOrFactory = Union[paddle.optimizer.Optimizer, Callable[[list], paddle.optimizer.Optimizer]]


@dataclass
class Prepared:
    model: paddle.nn.Layer  # the model after prepare_model (a LoRA wrapper, say): its parameters are trained
    network: Any  # what trains: the model wrapped for training (DataParallel, fleet, to_static)
    optimizer: Any
    runner: StepRunner
    facts: Facts = field(default_factory=dict)  # what the mechanisms learned about the model


def configure(config: Any, strategy: Any, settings: dict[str, Any]) -> Any:
    """Before the model is built: what it reads from its configuration at construction. Returns the config."""
    for mechanism in MECHANISMS:
        mechanism.configure_model(config, strategy, settings.get(mechanism.name))
    return config


def prepare(model: paddle.nn.Layer, optimizer: OptimizerOrFactory, strategy: Any, settings: dict[str, Any]) -> Prepared:
    """Every mechanism, in registry order. `optimizer` may be a factory of the parameters to train (needed when a
    mechanism adds parameters, as LoRA does); raises BuildError when a mechanism cannot apply to the model."""
    facts: Facts = {}
    before = {id(p) for p in model.parameters()}
    for mechanism in MECHANISMS:
        model, learned = mechanism.prepare_model(model, strategy, settings.get(mechanism.name))
        if learned:
            facts.update(learned)
    if isinstance(optimizer, paddle.optimizer.Optimizer):
        if {id(p) for p in model.parameters()} != before:
            raise TypeError("the strategy adds parameters to the model (LoRA): pass an optimizer factory, e.g. "
                            "lambda parameters: paddle.optimizer.AdamW(parameters=parameters)")
    else:
        optimizer = optimizer(model.parameters())
    network = model
    for mechanism in MECHANISMS:
        network, optimizer = mechanism.prepare_training(network, optimizer, strategy, settings.get(mechanism.name))
    return Prepared(model, network, optimizer, StepRunner(network, optimizer, strategy, settings), facts)
