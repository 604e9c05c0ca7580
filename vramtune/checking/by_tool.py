"""`check` verified by the file's own tool (issue 36): where the probe passes, the tool trains the checked file itself,
bounded (PaddleFormers' workflow; the user's `--verify-with` command for the others), with one evaluation pass where
the file evaluates, and its peaks (training's and evaluation's) must fit too."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from vramtune.core.records import Budget, Device
from vramtune.core.strategy import Strategy
from vramtune.core.verification import VerifyRequest
from vramtune.mechanisms.evaluation.kept import probe_evaluation
from vramtune.probing.runner import Backend
from vramtune.spec import Spec
from vramtune.verifying.answer import TIMEOUT, verifier, words


def by_tool(verdict: dict[str, Any], spec: Spec, strategy: Strategy, backend: Backend, device: Device,
            budget: Budget, command: str | None) -> dict[str, Any]:
    """The verdict with the tool's run in it ("verification"): a pass whose tool ran over the limit or did not train
    fails, with the tool's line as the reason. Where no tool runs without a command (a spec's loop, a PaddleNLP
    script, a kit), or none can run here, the verdict is the probe's alone, as `apply` says when it writes."""
    if verdict["status"] != "pass":
        return verdict
    tool_run = verifier(spec.dialect, None, command)
    with tempfile.TemporaryDirectory(prefix="vramtune-verify-") as scratch:
        run = tool_run if isinstance(tool_run, str) else tool_run(
            VerifyRequest(spec, Path(spec.path), strategy, device, Path(scratch), command))
        if isinstance(run, str):  # nothing here trains the file without a command: the gate stays the probe's
            return verdict
        verified = backend.verify(run, strategy, device, budget, TIMEOUT)
    measured = verdict["measured"] or {}
    verified.probe_bytes = measured.get("reserved_bytes") or measured.get("peak_bytes")
    verified.probe_eval_bytes = probe_evaluation(measured, verified.eval_batch)
    verdict["verification"] = verified.to_json()
    line = words(verified, budget)
    if verified.status == "fits":
        verdict["notes"].append(line)
    else:
        verdict["status"] = "fail"
        verdict["reasons"].append(line)
    verdict["notes"] += [f"  {note}" for note in verified.notes]
    return verdict
