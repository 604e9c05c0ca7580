"""The ladder's data: which mechanism plays which role, in order. The core (search/ladder.py) runs the roles;
each mechanism supplies the functions of its roles (mechanisms/base.py). A new mechanism the search explores is
named here; one the user fixes (its settings only) is not.

- whole_batch: tried at the whole batch (one micro-batch per rank), before any accumulation, in this order.
- outer: alternatives each searched in depth (accumulation, then the axes), nested in this order (the first
  outermost); an alternative is searched only where it could win.
- axes: searched at one micro-batch, from most saving to none, at micro-batches larger than plain accumulation
  reaches, while larger is faster; one axis at a time, the others off.
- refine: variants of the best configuration, tried last and kept only when they measured better.
"""
from __future__ import annotations

WHOLE_BATCH = ["sharding", "precision"]
OUTER = ["precision", "sharding"]
AXES = ["recompute"]
REFINE = ["to_static"]
