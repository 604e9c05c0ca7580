"""The real client: a kit's own, unmodified tools/train.py run on a config vramtune wrote, bounded by the kit's own
keys (one epoch over a tiny synthetic dataset made here), with a peak hook: a sitecustomize on PYTHONPATH that
prints Paddle's host allocator peak when the process exits."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import HUNG

KITS = Path(os.environ.get("VRAMTUNE_KITS", Path(__file__).resolve().parents[2].parent / "shared" / "kits"))
PEAK = re.compile(r"VRAMTUNE_KIT_PEAK (\d+)")
HOOK = """import atexit, sys


def _peak():
    paddle = sys.modules.get("paddle")
    if paddle is not None:
        print("VRAMTUNE_KIT_PEAK", paddle.base.core.host_memory_stat_peak_value("Allocated", 0), flush=True)


atexit.register(_peak)
"""


def kit(name: str) -> Path | None:
    """The kit's checkout for tests, or None where it is absent."""
    folder = KITS / name
    return folder if (folder / "tools" / "train.py").is_file() else None


def write_images(folder: Path, count: int, height: int, width: int) -> list[str]:
    """`count` random JPEGs of the given size; their file names."""
    import cv2
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = []
    for index in range(count):
        name = f"img_{index}.jpg"
        cv2.imwrite(str(folder / name), rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
        names.append(name)
    return names


def run_train(checkout: Path, config: Path, options: list[str], work: Path, timeout: float = HUNG,
              one_flag: bool = False) -> tuple[int, str]:
    """Run the kit's tools/train.py (cwd: the checkout, as its docs do); (host allocator peak, the output).
    one_flag: every override after one -o (PaddleOCR's argparse nargs="+"), else one -o each (PaddleClas)."""
    hook = work / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    env = {**child_env(), "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    arguments = [sys.executable, "tools/train.py", "-c", str(config)]
    if one_flag and options:
        arguments += ["-o", *options]
    else:
        for option in options:
            arguments += ["-o", option]
    done = subprocess.run(arguments, cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    found = PEAK.findall(output)
    if done.returncode or not found:
        raise AssertionError(f"tools/train.py failed ({done.returncode}):\n{output[-4000:]}")
    return int(found[-1]), output


# what each kit imports beside Paddle (its requirements.txt); a test of a kit's own code skips without them
REQUIREMENTS = {"PaddleClas": ("cv2", "easydict", "prettytable", "ujson"),
                "PaddleOCR": ("cv2", "shapely", "pyclipper", "lmdb", "rapidfuzz", "skimage")}


def missing(name: str) -> list[str]:
    import importlib.util

    return [module for module in REQUIREMENTS[name] if importlib.util.find_spec(module) is None]


def has_requirements(name: str) -> bool:
    return not missing(name)


def missing_reason(name: str) -> str:
    return f"{name}'s requirements are not installed here (missing {', '.join(missing(name))})"


def child_env() -> dict[str, str]:
    """The environment of a child that imports a kit's checkout: never writes bytecode into it."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CUDA_VISIBLE_DEVICES": ""}
