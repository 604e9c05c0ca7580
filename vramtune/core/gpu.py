"""A GPU's physical identity and what the driver says of its memory, Paddle-free: the child's device description
reads each GPU's PCI bus id through the CUDA driver (the enumeration Paddle's ordinals are, under any
CUDA_VISIBLE_DEVICES; no context is made); the parent asks nvidia-smi what a card holds, and for whom (NVML: no
context either), before a probe and for budget `auto`."""
from __future__ import annotations

import contextlib
import ctypes
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable

MiB = 2**20
SMI_TIMEOUT = 10.0


def bus_id(text: str) -> str:
    """A PCI bus id as one string whoever says it: CUDA's '0000:3B:00.0', nvidia-smi's '00000000:3B:00.0' ->
    '0000:3b:00.0'."""
    domain, _, rest = text.strip().partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def pci_bus_ids(load: Callable[[str], Any] = ctypes.CDLL) -> list[str]:
    """Every GPU the CUDA driver shows this process, by ordinal (Paddle's numbering): its PCI bus id; [] where the
    driver cannot say (no libcuda, an error)."""
    try:
        cuda = load("libcuda.so.1")
    except OSError:
        return []
    count = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    found = []
    for ordinal in range(count.value):
        device, text = ctypes.c_int(), ctypes.create_string_buffer(64)
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0 or cuda.cuDeviceGetPCIBusId(text, 64, device) != 0:
            return []
        found.append(bus_id(text.value.decode()))
    return found


@dataclass
class CardUse:
    """What nvidia-smi says one card holds: its memory, and the processes computing on it (none listed where the
    driver cannot see them, as in a container's own PID namespace)."""

    total_bytes: int
    used_bytes: int
    free_bytes: int
    pids: list[int] = field(default_factory=list)


def _smi(query: str, run: Callable[..., Any]) -> list[list[str]] | None:
    try:
        done = run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"], capture_output=True,
                   text=True, timeout=SMI_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def card_use(run: Callable[..., Any] = subprocess.run) -> dict[str, CardUse] | None:
    """Every card's use by PCI bus id, or None where nvidia-smi cannot say (not installed, no driver)."""
    cards = _smi("gpu=pci.bus_id,memory.total,memory.used,memory.free", run)
    if cards is None:
        return None
    try:
        use = {bus_id(bus): CardUse(int(float(total) * MiB), int(float(used) * MiB), int(float(free) * MiB))
               for bus, total, used, free in cards}
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None
    for row in _smi("compute-apps=pid,gpu_bus_id", run) or []:
        with contextlib.suppress(ValueError):
            if len(row) == 2 and bus_id(row[1]) in use:
                use[bus_id(row[1])].pids.append(int(row[0]))
    return use
