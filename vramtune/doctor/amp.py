"""The precision mechanism's doctor check. AMP: under O1 a matmul's output is half precision and
a small transformer step peaks below fp32's (the activation ratio reported: it calibrates `estimate`); O2's decorate
casts the weights and keeps fp32 master weights; GradScaler steps, and skips a step whose gradients are not finite.
fp16 and bf16 where the device has them. On CPU the check is that AMP is a no-op there, as vramtune assumes when it
skips AMP on CPU."""
from __future__ import annotations

import statistics
from typing import Any

from vramtune.core.records import Device
from vramtune.core.strategy import AMP_DTYPES
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict, failed_run


def precisions(device: Device) -> list[str]:
    return [p for p in AMP_DTYPES if p not in device.amp_unsupported] if device.kind == "gpu" else list(AMP_DTYPES)


def _dtypes(device: Device) -> dict[str, Any]:
    """The matmul's output dtype under O1, and after O2's decorate and one step the weights' dtype and the
    optimizer's master weights, for each precision."""
    import paddle

    from vramtune.doctor.workload import use

    use(device)
    figures: dict[str, Any] = {}
    for precision in precisions(device):
        dtype = AMP_DTYPES[precision]
        x, w = paddle.randn([64, 64]), paddle.randn([64, 64])
        with paddle.amp.auto_cast(level="O1", dtype=dtype):
            out = paddle.matmul(x, w)
        model = paddle.nn.Linear(64, 64)
        optimizer = paddle.optimizer.AdamW(parameters=model.parameters())
        model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2", dtype=dtype)
        with paddle.amp.auto_cast(level="O2", dtype=dtype):
            loss = model(paddle.randn([8, 64])).astype("float32").mean()
        loss.backward()
        optimizer.step()
        masters = getattr(optimizer, "_master_weights", {}) or {}
        figures[precision] = {"o1_matmul": str(out.dtype).replace("paddle.", ""),
                              "o2_weight": str(model.weight.dtype).replace("paddle.", ""),
                              "o2_masters": sorted({str(t.dtype).replace("paddle.", "") for t in masters.values()}),
                              "o2_master_count": len(masters), "parameters": len(model.parameters())}
    return figures


def _scaler(device: Device) -> dict[str, Any]:
    """GradScaler on fp16 O1: a finite step updates the weights; a step with an inf gradient is skipped (weights
    unchanged) and the loss scale decreases."""
    import paddle

    from vramtune.doctor.workload import use

    use(device)
    model = paddle.nn.Linear(16, 16)
    optimizer = paddle.optimizer.AdamW(learning_rate=0.1, parameters=model.parameters())
    scaler = paddle.amp.GradScaler(init_loss_scaling=1024)
    moved = []
    for poison in (1.0, float("inf")):
        before = model.weight.numpy().copy()
        with paddle.amp.auto_cast(level="O1", dtype="float16"):
            loss = (model(paddle.randn([4, 16])) * poison).astype("float32").mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.clear_grad()
        moved.append(bool((model.weight.numpy() != before).any()))
    return {"enabled": scaler.is_enable(), "finite_step_updated": moved[0], "inf_step_updated": moved[1],
            "scale_after": float(scaler._scale) if getattr(scaler, "_scale", None) is not None else None}


def _peak(device: Device, part: str) -> dict[str, Any]:
    """A small transformer's step at one precision, as a probe runs it: O2 decorated, each forward under auto_cast at
    the level, fp16 on a GPU with a GradScaler."""
    import contextlib

    import paddle

    from vramtune.doctor.workload import step_peak, transformer

    precision, _, level = part.partition("-")
    dtype = AMP_DTYPES.get(precision, "float32")

    def decorate(model: Any, optimizer: Any) -> tuple[Any, Any]:
        return paddle.amp.decorate(models=model, optimizers=optimizer, level="O2", dtype=dtype)

    def forward() -> contextlib.AbstractContextManager:
        return paddle.amp.auto_cast(level=level, dtype=dtype) if level else contextlib.nullcontext()

    def scaler() -> Any:
        return paddle.amp.GradScaler(init_loss_scaling=1024)

    return step_peak(device, transformer(), prepare=decorate if level == "O2" else None, forward=forward,
                     make_scaler=scaler if precision == "fp16" and device.kind == "gpu" else None)


def activation_ratio(runs: dict[str, CheckRun], part: str) -> float:
    """The part's activations over fp32's; O1's half weight copies (2 bytes per matmul parameter) are not
    activations (`estimate` counts them apart)."""
    fp32, f = runs["fp32"].figures, runs[part].figures
    copies = 2 * f["matmul_parameters"] if part.endswith("O1") else 0
    return (f["activations"] - copies) / fp32["activations"]


class Amp(Check):
    name = "amp"
    title = "AMP O1/O2 and GradScaler"
    calibrates = ("AMP O1 activations", "AMP O2 activations")

    def factors(self, figures: dict[str, dict[str, Any]]) -> dict[str, tuple[str, float]]:
        """AMP O1's and O2's activations over fp32's: the median over the precisions the card has."""
        runs = {part: CheckRun("measured", measured) for part, measured in figures.items()}
        found = {}
        for level, factor in (("O1", "o1_activations"), ("O2", "o2_activations")):
            ratios = [activation_ratio(runs, part) for part in runs if part.endswith(level)]
            if ratios:
                found[factor] = (f"AMP {level} activations", statistics.median(ratios))
        return found

    def parts(self, device: Device) -> tuple[str, ...]:
        if device.kind != "gpu":
            return ("dtypes",)
        half = precisions(device)
        peaks = [f"{p}-{level}" for p in half for level in ("O1", "O2")]
        return ("dtypes", *(["scaler"] if "fp16" in half else []), *(["fp32"] if half else []), *peaks)

    def skip(self, device: Device) -> str | None:
        if device.kind == "gpu" and not precisions(device):
            return "; ".join(device.amp_unsupported.values())
        return None

    def measure(self, device: Device, part: str) -> dict[str, Any]:
        if part == "dtypes":
            return _dtypes(device)
        if part == "scaler":
            return _scaler(device)
        return _peak(device, part)

    def judge(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        failed = failed_run(runs)
        if failed:
            return failed
        dtypes = runs["dtypes"].figures
        if device.kind != "gpu":
            cast = {p: f for p, f in dtypes.items() if f["o1_matmul"] != "float32" or f["o2_weight"] != "float32"}
            figure = ("auto_cast changes nothing here: under " + " and ".join(dtypes) + " a matmul's output stays "
                      "float32 and O2's decorate keeps float32 weights (AMP's memory and GradScaler are checked on "
                      "a GPU)")
            if cast:
                return Verdict(FAIL, f"auto_cast casts on this CPU: {cast}",
                               "vramtune skips AMP on CPU as a no-op; this Paddle casts there, so CPU AMP results "
                               "would be missing")
            return Verdict(PASS, figure)
        return self._judge_gpu(runs, device)

    def _judge_gpu(self, runs: dict[str, CheckRun], device: Device) -> Verdict:
        figures, problems = [], []
        for precision, f in runs["dtypes"].figures.items():
            half = AMP_DTYPES[precision]
            figures.append(f"{precision} O1 matmul {f['o1_matmul']}, O2 weights {f['o2_weight']} with "
                           f"{f['o2_master_count']} master weights {'/'.join(f['o2_masters']) or '-'}")
            if f["o1_matmul"] != half:
                problems.append(f"auto_cast O1 does not cast a matmul to {half}: vramtune's {precision} rung "
                                "measures fp32 under another name")
            if f["o2_weight"] != half or f["o2_masters"] != ["float32"] or f["o2_master_count"] < f["parameters"]:
                problems.append(f"O2's decorate does not keep {half} weights with float32 master weights: the "
                                f"{precision} O2 state vramtune counts (2 + 4 bytes per parameter) is wrong")
        if "scaler" in runs:
            s = runs["scaler"].figures
            figures.append(f"GradScaler {'stepped' if s['finite_step_updated'] else 'did not step'} on a finite "
                           f"step, {'updated' if s['inf_step_updated'] else 'skipped'} an inf step (scale "
                           f"{s['scale_after']})")
            if not s["enabled"] or not s["finite_step_updated"] or s["inf_step_updated"]:
                problems.append("GradScaler does not step finite gradients and skip inf ones: fp16 probes' losses "
                                "and their optimizer state are not what training would see")
        peaks = [part for part in runs if part.endswith(("O1", "O2"))]
        for part in peaks:
            ratio, fp32 = activation_ratio(runs, part), runs["fp32"].figures["peak"]
            figures.append(f"{part} peak {runs[part].figures['peak'] / fp32:.2f} of fp32's, activations x{ratio:.2f}")
            if runs[part].figures["peak"] >= fp32:
                problems.append(f"{part} peaks no lower than fp32: the AMP rung saves nothing here")
        figure = "; ".join(figures)
        if problems:
            return Verdict(FAIL, figure, "; ".join(problems))
        return Verdict(PASS, figure)


CHECK = Amp()
