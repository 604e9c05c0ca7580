"""The real client: a kit's own, unmodified tools/train.py run on a config vramtune wrote, bounded by the kit's own
keys (one epoch over a tiny synthetic dataset made here), with a peak hook: a sitecustomize on PYTHONPATH that
prints Paddle's host allocator peak when the process exits, and PaddleOCR's evaluations' apart (eval_peak)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import HUNG

KITS = Path(os.environ.get("VRAMTUNE_KITS", Path(__file__).resolve().parents[2].parent / "shared" / "kits"))
PEAK = re.compile(r"VRAMTUNE_KIT_PEAK (\d+)")
EVAL_PEAK = re.compile(r"VRAMTUNE_KIT_EVAL_PEAK (\d+)")
HOOK = """import atexit, importlib.abc, importlib.util, sys

peaks = {"run": 0, "eval": None}


def _phase(name):
    \"\"\"The peak since the last reset kept as the run's (and the phase's); the counter reset for the next.\"\"\"
    core = sys.modules["paddle"].base.core
    peak = int(core.host_memory_stat_peak_value("Allocated", 0))
    peaks["run"] = max(peaks["run"], peak)
    if name:
        peaks[name] = max(peaks[name] or 0, peak)
    core.host_memory_stat_reset_peak_value("Allocated", 0)


class _EvalPeak(importlib.abc.MetaPathFinder):
    \"\"\"PaddleOCR's tools/program.py: the peak of its eval() apart, the counter reset as each starts.\"\"\"

    def find_spec(self, name, path, target=None):
        if name != "tools.program":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            evaluate = module.eval

            def eval(*args, **kwargs):
                _phase(None)
                try:
                    return evaluate(*args, **kwargs)
                finally:
                    _phase("eval")

            module.eval = eval

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _EvalPeak())


def _peak():
    if "paddle" in sys.modules:
        _phase(None)
        print("VRAMTUNE_KIT_PEAK", peaks["run"], flush=True)
        if peaks["eval"] is not None:
            print("VRAMTUNE_KIT_EVAL_PEAK", peaks["eval"], flush=True)


atexit.register(_peak)
"""


def kit(name: str) -> Path | None:
    """The kit's checkout for tests, or None where it is absent."""
    folder = KITS / name
    return folder if (folder / "tools" / "train.py").is_file() else None


def user_clas_checkout(root: Path, clas: Path, name: str, text: str) -> tuple[Path, Path]:
    """A PaddleClas checkout of symlinks (its ppcls and tools) under `root` holding `text` as the user's own config
    `name`: the checkout and the config."""
    checkout = root / "PaddleClas"
    checkout.mkdir()
    for part in ("ppcls", "tools"):
        (checkout / part).symlink_to(clas / part)
    mine = checkout / name
    mine.write_text(text)
    return checkout, mine


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


def eval_peak(output: str) -> int | None:
    """The peak of PaddleOCR's evaluations in a run_train output (tools/program.py's eval()), None without one."""
    found = EVAL_PEAK.findall(output)
    return int(found[-1]) if found else None


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
