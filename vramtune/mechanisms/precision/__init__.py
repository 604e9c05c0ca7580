"""Precision: fp32, AMP O1 (auto_cast, weights fp32) and O2 (paddle.amp.decorate: weights half, the optimizer holding
fp32 master weights), in fp16 (with a GradScaler) or bf16.

Memory: weights + gradients + AdamW state come to 16 B/param at both levels: O1 4 + 4 + 8, O2 2 + 2 + (4 master + 8
moments); O2 also drops the half copies of the weights that O1's white-listed ops keep for backward (~2 B/param),
and gray-listed ops produce half activations. O2 is its own memory group (its own fitted line, its own counted
state), measured rather than derived from O1.

In the search: AMP at the whole batch (least memory first, stopping at the first that does not fit), then each
precision searched in depth where it could win (fp16-safe retried only after fp16 went non-finite; fp32 last).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramtune.core.strategy import AMP_DTYPES, AMP_PRECISIONS, FIELDS, SAFE_BLACK_LIST, dtype_of, level_of
from vramtune.core.text import did_you_mean
from vramtune.mechanisms.base import Mechanism, Option, SearchView

# what PaddleNLP's Trainer (2.8, autocast_smart_context_manager) passes to auto_cast, so probes train as it does
TRAINER_BLACK_LIST = ("reduce_sum", "c_softmax_with_cross_entropy")
TRAINER_O2_WHITE_LIST = ("lookup_table", "lookup_table_v2")  # embeddings return half under O2
LOSS_SCALE = 2.0**15


@dataclass
class PrecisionSettings:
    allowed: list[str] = field(default_factory=lambda: list(AMP_PRECISIONS))  # search.precisions, least memory first
    master_grad: bool = False  # train.amp_master_grad: fp32 gradients under O2, as PaddleNLP's Trainer keeps them
    black_list: list[str] = field(default_factory=list)  # train.amp_custom_black_list: ops kept in fp32
    white_list: list[str] = field(default_factory=list)  # train.amp_custom_white_list: ops run in half


def _allowed(values: list[str] | None) -> dict[str, Any]:
    return {"search.precisions": None if values is None else [v for v in values if v != "fp32"]}


class Precision(Mechanism):
    name = "precision"
    fields = (FIELDS["precision"],)
    options = (Option("precision", "--precision", str, None, "AMP modes allowed (fp16, bf16, fp16-o2, bf16-o2; fp32 "
                      "alone means no AMP); repeat the option for several", _allowed, multiple=True,
                      choices=("fp32", *AMP_PRECISIONS)),)
    shares_memory_group = True  # fp16 and bf16 take the same bytes

    def read(self, spec) -> PrecisionSettings:
        """search.precisions: the AMP modes allowed, least memory first whatever the spec's order; the Trainer's
        AMP options under train:."""
        section = spec.search
        values = section.get("precisions", list, list(AMP_PRECISIONS))
        if values is None:
            values = list(AMP_PRECISIONS)
        bad = [p for p in values if p not in ("fp32", *AMP_PRECISIONS)]
        if "fp16-safe" in bad:
            section.fail("precisions", "fp16-safe is not listed: it is tried by itself when fp16 goes non-finite")
        elif bad:
            section.fail("precisions", f"unknown precision {bad[0]!r}{did_you_mean(bad[0], AMP_PRECISIONS)}; "
                                       f"allowed: {', '.join(AMP_PRECISIONS)} (fp32 is always tried)")
        lists = {name: spec.train.get(f"amp_custom_{name}", list, []) or [] for name in ("black_list", "white_list")}
        return PrecisionSettings([p for p in AMP_PRECISIONS if p in values],
                                 bool(spec.train.get("amp_master_grad", bool, False)), **lists)


    def child_settings(self, settings: PrecisionSettings, budget) -> dict[str, Any]:
        return {"master_grad": settings.master_grad, "black_list": settings.black_list,
                "white_list": settings.white_list}

    def weight(self, strategy) -> int:
        """O1 wins a tie with O2 (fewer numerics changed), fp32 wins a tie with both."""
        return {"O0": 0, "O1": 1, "O2": 2}[level_of(strategy.precision)]

    def unsupported(self, strategy, device) -> str | None:
        return device.amp_unsupported.get(dtype_of(strategy.precision))

    def memory_group(self, strategy) -> str:
        """fp16 and bf16 take the same bytes; O2 takes its own."""
        return {"O0": "fp32", "O1": "amp", "O2": "amp-o2"}[level_of(strategy.precision)]

    def speed_group(self, strategy) -> str:
        return strategy.precision

    # -- the estimate ------------------------------------------------------------------------------------
    def counted_state(self, state, strategy, counts, given) -> dict[str, int]:
        """O2: half weights (decorate keeps batch norms, and under fp16 layer norms, in fp32), half gradients (fp32
        with amp_master_grad) and fp32 master weights beside the optimizer's state; O1: fp32 state and a half copy
        of each matmul and conv weight kept for backward."""
        level = level_of(strategy.precision)
        if level == "O2":
            kept = counts.batchnorm + (counts.layernorm if dtype_of(strategy.precision) == "fp16" else 0)
            state = {**state, "weights": 2 * (counts.params - kept) + 4 * kept,
                     "gradients": (4 if given.master_grad else 2) * counts.trainable,
                     "optimizer_state": state["optimizer_state"] + 4 * counts.trainable}
        return {**state, "amp_copies": 2 * counts.matmul if level == "O1" else 0}

    def activation_factor(self, strategy, factors) -> float:
        return {"O0": 1.0, "O1": factors.o1_activations, "O2": factors.o2_activations}[level_of(strategy.precision)]


    # -- search ------------------------------------------------------------------------------------------
    def amp(self, search: SearchView) -> list[str]:
        """The AMP modes the spec allows and the device runs, least memory first."""
        return [p for p in search.settings(self.name).allowed if not search.unsupported(search.base.with_(precision=p))]

    def notes(self, search: SearchView) -> list[str]:
        skipped: dict[str, list[str]] = {}  # why -> the precisions skipped for it
        for precision in search.settings(self.name).allowed:
            why = search.unsupported(search.base.with_(precision=precision))
            if why:
                skipped.setdefault(why, []).append(precision)
        return [f"{', '.join(precisions)} skipped: {why}" for why, precisions in skipped.items()]

    def suggest(self, search: SearchView) -> list[str]:
        if len(self.amp(search)) < len(search.settings(self.name).allowed):
            return ["AMP (fp16/bf16, O1 or O2) on a GPU, which roughly halves activation memory"]
        return []

    def whole_batch(self, base, search: SearchView) -> None:
        for precision in self.amp(search):
            if search.probe("amp", base.with_(precision=precision)).status in ("oom", "over_budget"):
                break  # least memory first (O2, then O1): the next one would not fit either

    def alternatives(self, base, search: SearchView):
        for precision in self.amp(search):
            yield {"precision": precision}
        if self.fp16_unstable(search):
            stable = self.stable_bf16(search)
            if stable:
                search.note(f"fp16 was unstable (non-finite loss); {stable} trains stably with fp16's bytes and "
                            "speed: fp16-safe (slower than fp16) not tried")
            else:
                search.note("fp16 was unstable (non-finite loss): trying fp16-safe (overflow-prone ops in fp32)")
                yield {"precision": "fp16-safe"}
        yield {"precision": "fp32"}

    def worth_searching(self, candidate, search: SearchView) -> bool:
        """Measured at the best configuration; fp16 at another level is not searched once fp16 went non-finite
        where a bf16 mode trains stably (bf16 has fp16's bytes and speed, and fp32's range)."""
        if dtype_of(candidate.precision) == "fp16" and candidate.precision != "fp16-safe" and \
                self.fp16_unstable(search) and self.stable_bf16(search):
            search.note(f"{candidate.precision} not searched: fp16 went non-finite and "
                        f"{self.stable_bf16(search)} trains stably")
            return False
        return search.could_win(self, candidate)

    @staticmethod
    def stable_bf16(search: SearchView) -> str | None:
        """A bf16 mode measured to fit and train stably, if any."""
        return next((s.precision for s, r in search.results.items() if dtype_of(s.precision) == "bf16" and r.fits),
                    None)

    @staticmethod
    def fp16_unstable(search: SearchView) -> bool:
        """fp16 (O1 or O2) went non-finite and never trained stably."""
        fp16 = [r for s, r in search.results.items() if s.precision in ("fp16", "fp16-o2")]
        return any(r.status == "unstable" for r in fp16) and not any(r.fits for r in fp16)

    # -- child side --------------------------------------------------------------------------------------
    def prepare_training(self, model, optimizer, strategy, settings):
        """O2: the weights cast to half (BatchNorm kept fp32, and LayerNorm/InstanceNorm under fp16) and the
        optimizer given fp32 master weights, as PaddleNLP's Trainer does for fp16_opt_level O2, before data
        parallel or sharding wrap them (decorate refuses a wrapped model); with amp_master_grad, each half gradient
        moved into an fp32 `main_grad` the optimizer steps on (the Trainer's MixPrecisionLayer / Optimizer)."""
        if level_of(strategy.precision) != "O2":
            return model, optimizer
        import paddle

        dtype = AMP_DTYPES[dtype_of(strategy.precision)]
        model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2", dtype=dtype)
        if (settings or {}).get("master_grad"):
            from paddle.distributed.fleet.utils import mix_precision_utils

            mix_precision_utils.MixPrecisionLayer(model, dtype=dtype)
            optimizer = mix_precision_utils.MixPrecisionOptimizer(optimizer)
        return model, optimizer

    def forward_context(self, strategy, settings):
        """auto_cast with the lists PaddleNLP's Trainer passes, the run's own, and fp16-safe's."""
        import paddle

        precision = strategy.precision
        level = level_of(precision)
        own = settings or {}
        safe = SAFE_BLACK_LIST if precision == "fp16-safe" else ()
        black = {*TRAINER_BLACK_LIST, *own.get("black_list", ()), *safe}
        white = {*own.get("white_list", ()), *(TRAINER_O2_WHITE_LIST if level == "O2" else ())}
        return paddle.amp.auto_cast(enable=level != "O0", dtype=AMP_DTYPES.get(dtype_of(precision), "float16"),
                                    level=level, custom_black_list=black, custom_white_list=white)

    def scaler(self, scaler, strategy, settings):
        """fp16 needs a loss scaler (bf16 has fp32's range)."""
        if dtype_of(strategy.precision) != "fp16":
            return scaler
        import paddle

        return paddle.amp.GradScaler(init_loss_scaling=LOSS_SCALE)


MECHANISM = Precision()
