"""The device: what Paddle sees (count, name, compute capability, memory, Paddle/CUDA/cuDNN versions). It runs
first: its figures are the Device every other check measures on."""
from __future__ import annotations

from typing import Any

from vramtune.core.records import Device
from vramtune.core.units import format_bytes
from vramtune.doctor.base import FAIL, PASS, Check, CheckRun, Verdict, failed_run


class DeviceFacts(Check):
    name = "device"
    title = "the device Paddle sees"

    def measure(self, device: Device | str, part: str) -> dict[str, Any]:
        """`device` is what the user asked for ('auto', 'cpu', 'gpu:N'): this check resolves it."""
        import paddle

        from vramtune.child.device import DeviceUnavailable, describe

        facts: dict[str, Any] = {"paddle": paddle.__version__, "cuda_build": paddle.is_compiled_with_cuda(),
                                 "cuda": paddle.version.cuda(), "cudnn": paddle.version.cudnn()}
        try:
            found = describe(str(device))
        except DeviceUnavailable as error:
            return {**facts, "unavailable": str(error)}
        if found.kind == "gpu":
            properties = paddle.device.cuda.get_device_properties(found.index)
            facts["capability"] = f"{properties.major}.{properties.minor}"
        return {**facts, "device": found.to_json()}

    def judge(self, runs: dict[str, CheckRun], device: Device | None) -> Verdict:
        failed = failed_run(runs)
        if failed:
            return failed
        f = runs[""].figures
        if "unavailable" in f:
            return Verdict(FAIL, f["unavailable"], "vramtune cannot measure on this device: every probe would fail")
        found = Device.from_json(f["device"])
        if found.kind == "cpu":
            return Verdict(PASS, f"{found.name}, {found.count} cores, {format_bytes(found.total_bytes)}; "
                                 f"Paddle {f['paddle']} ({'CUDA build' if f['cuda_build'] else 'CPU build'})")
        figure = (f"{found.name} (compute capability {f['capability']}), {format_bytes(found.total_bytes)}, "
                  f"{found.count} GPU(s); Paddle {f['paddle']}, CUDA {f['cuda']}, cuDNN {f['cudnn']}; "
                  f"{amp_words(found)}")
        if found.total_bytes <= 0:
            return Verdict(FAIL, figure, "Paddle reports no memory on the card: budget 'auto' means nothing here")
        return Verdict(PASS, figure)


def amp_words(device: Device) -> str:
    """What the device line says of AMP on a GPU: the precisions the card cannot run, or that it runs them all."""
    return "; ".join(device.amp_unsupported.values()) or "fp16 and bf16 AMP supported"


CHECK = DeviceFacts()
