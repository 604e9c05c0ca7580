"""The state the search counts before its first probe (search/counted.py over the estimate's lazy count,
child/counting.py) is, part by part, what a real probe of the same strategy reports (child/training.state_counts)."""
from __future__ import annotations

import pytest
import yaml
from conftest import SPECS

from vramtune.core.strategy import Strategy
from vramtune.probing.runner import ChildBackend
from vramtune.spec import load_spec
from vramtune.tuning.session import measure, open_session, search_problem

pytestmark = pytest.mark.paddle


@pytest.mark.parametrize("optimizer", ["adamw", "momentum", "sgd"])
def test_the_counted_state_is_what_a_probe_reports(write_spec, optimizer):
    """On CPU, fp32 (AMP has no effect there); the AMP parts are the estimate's, tested against probes there."""
    raw = yaml.safe_load((SPECS / "rung-plain.yaml").read_text())
    raw["train"]["optimizer"] = optimizer
    session = open_session(load_spec(write_spec(yaml.safe_dump(raw))), ChildBackend(), print)
    strategy = Strategy(micro_batch=64, accumulation=4)
    probe = measure(session, strategy, print)
    assert probe.measured, probe.error
    counted = search_problem(session).state(strategy)
    assert (counted["weight"], counted["gradient"]) == (probe.weight_bytes, probe.gradient_bytes)
    # the count leaves out what does not grow with the parameters: Adam's two one-element beta-power accumulators per
    # parameter tensor (176 B for this MLP's 22 tensors)
    extra = {"adamw": 22 * 2 * 4, "momentum": 0, "sgd": 0}[optimizer]
    assert probe.optimizer_bytes - counted["optimizer"] == extra
