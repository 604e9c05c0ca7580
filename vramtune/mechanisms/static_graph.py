"""to_static: the model's forward compiled to a static graph (`paddle.jit.to_static(full_graph=True)`), which may
reuse memory more aggressively than eager mode. Measured, never assumed: the ladder tries it where memory is
tight and keeps it only when it measured better. A model that cannot be converted says why, once."""
from __future__ import annotations

from vramtune.mechanisms.base import Field, Mechanism


def _flag(value: bool) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


class StaticGraph(Mechanism):
    name = "to_static"
    fields = (Field("to_static", bool, False, "--to-static", "-t", "compile the forward with paddle.jit.to_static",
                    _flag),)

    search_keys = ("to_static",)

    def read_search(self, section) -> bool:
        return section.get("to_static", str, "auto", choices=("auto", "off")) != "off"

    def label(self, strategy, total_blocks: int | None = None) -> str:
        return "static" if strategy.to_static else ""

    def weight(self, strategy) -> int:
        return int(strategy.to_static)

    def memory_group(self, strategy) -> str:
        return "static" if strategy.to_static else ""

    def prepare_training(self, model, optimizer, strategy):
        if not strategy.to_static:
            return model, optimizer
        import paddle

        return paddle.jit.to_static(model, full_graph=True), optimizer

    def paddlenlp(self, tuned):
        if tuned.get("to_static"):
            return {"to_static": True}, []
        return {}, []


MECHANISM = StaticGraph()
