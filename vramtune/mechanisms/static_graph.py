"""to_static: the model's forward compiled to a static graph (`paddle.jit.to_static(full_graph=True)`), which may
reuse memory more aggressively than eager mode. Measured, never assumed: the ladder tries it at the best
configuration and keeps it only when it measured better. A model that cannot be converted says why, once.
Not tried for PaddleNLP models: their Trainer converts with its own to_static path, so what would be measured is
not what the Trainer would run."""
from __future__ import annotations

from vramtune.core.strategy import FIELDS
from vramtune.mechanisms.base import Mechanism, SearchView


class StaticGraph(Mechanism):
    name = "to_static"
    fields = (FIELDS["to_static"],)

    def read(self, spec) -> bool:
        wanted = spec.search.get("to_static", str, "auto", choices=("auto", "off")) != "off"
        return wanted and spec.model.data.get("source") != "paddlenlp"


    def weight(self, strategy) -> int:
        return int(strategy.to_static)

    def memory_group(self, strategy) -> str:
        return "static" if strategy.to_static else ""

    def refine(self, best, search: SearchView) -> None:
        """to_static at the best configuration: a static graph may reuse memory more (and often runs faster).
        Where the best needed recompute, its measured memory saving may let the same micro-batch run without it."""
        if not search.settings(self.name) or best.strategy.to_static:
            return
        static = search.probe("static", best.strategy.with_(to_static=True))
        if static.status == "unsupported":
            search.note(f"to_static skipped: {static.error}")
            return
        plain = search.results.get(search.without_axes(best.strategy))
        if static.used_bytes and plain is not None and plain.used_bytes and best.strategy != plain.strategy and \
                plain.used_bytes - (best.used_bytes - static.used_bytes) <= search.limit:
            search.probe("static", plain.strategy.with_(to_static=True))

    def prepare_training(self, model, optimizer, strategy, settings):
        """The forward compiled; a model it cannot convert says so at its first call (Unsupported)."""
        if not strategy.to_static:
            return model, optimizer
        from vramtune.mechanisms.static_graph_paddle import converted

        return converted(model), optimizer


MECHANISM = StaticGraph()
