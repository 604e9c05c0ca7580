"""Throughput noise for finding tests that depend on CPU timing (make test-noise; never part of make test).

On PYTHONPATH with VRAMTUNE_TEST_NOISE=A set, every probe result the parent reads from a child has its measured
throughput multiplied by a random factor in [1 - A, 1 + A] (its step time divided by it): what a loaded machine
does to CPU timing, only larger. Peaks are untouched (they are exact). A test that passes only when timing picks
one configuration fails under it; a test with timing taken out (a fixed strategy, a budget that leaves one answer,
fakes) does not notice. It patches vramtune.probing.runner.result_from when that module is first imported, in the test
process and in every vramtune process it starts.
"""
from __future__ import annotations

import dataclasses
import importlib.abc
import os
import random
import sys

AMPLITUDE = float(os.environ.get("VRAMTUNE_TEST_NOISE") or 0)


def _noisy(result_from):
    rng = random.Random()

    def noisy_result_from(*args, **kwargs):
        result = result_from(*args, **kwargs)
        if not result.samples_per_sec:
            return result
        factor = 1 + AMPLITUDE * rng.uniform(-1, 1)
        return dataclasses.replace(result, samples_per_sec=result.samples_per_sec * factor,
                                   step_seconds=(result.step_seconds or 0) / factor or None)
    return noisy_result_from


class _PatchRunner(importlib.abc.MetaPathFinder):
    """Loads vramtune.probing.runner as usual, then wraps its result_from."""

    def find_spec(self, name, path=None, target=None):
        if name != "vramtune.probing.runner":
            return None
        spec = next((found for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                     and (found := finder.find_spec(name, path, target)) is not None), None)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            module.result_from = _noisy(module.result_from)
        spec.loader.exec_module = exec_module
        return spec


if AMPLITUDE:
    sys.meta_path.insert(0, _PatchRunner())
