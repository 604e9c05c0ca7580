"""The answer verified by PaddleFormers' own workflow (issue 36): the tuned file trained for a few optimizer steps by
`python -m paddleformers.cli.launcher train` (the one-process form of `paddleformers-cli train`), from the folder
vramtune runs in (where the file's relative paths point), with the user's own key=value overrides that set no tuned
key. On a CPU it runs with the same CPU equivalents the probes ran (said), and PaddleFormers' paddle.device.synchronize
stubbed by the verification hook. Where the file evaluates, the Trainer's own evaluation runs once, in its training loop
after the last bounded step (`evaluation_strategy="steps" eval_steps=3`: the training state resident and the training
loader reading ahead, as where the real run evaluates), for a few evaluation steps (`max_evaluate_steps`), at the
evaluation batch the file states."""
from __future__ import annotations

import os
import sys

from vramtune.core.report import Tuned
from vramtune.core.verification import STEPS, ToolRun, VerifyRequest, evaluation_steps
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.export import given_overrides, tuned_keys
from vramtune.dialects.paddleformers.reading import read_config
from vramtune.dialects.paddleformers.source import cpu_equivalents
from vramtune.dialects.roundtrip import value_text
from vramtune.dialects.verify_with import user_run

TOOL = "PaddleFormers' workflow"


def bounded(scratch: str) -> list[str]:
    """The overrides that bound the run and keep its files out of the user's folders."""
    return [f"max_steps={STEPS}", 'save_strategy="no"', f"output_dir={scratch}", "logging_steps=1",
            "disable_tqdm=true"]


def evaluated(settings, config: dict) -> tuple[list[str], int | None, str | None]:
    """The overrides that make the Trainer evaluate once after the bounded steps, the evaluation batch, and the note
    that says so; nothing where the file does not evaluate (`settings`: the evaluation mechanism's, None then).
    The workflow turns an "epoch" strategy into every max_steps / num_train_epochs steps: "steps" keeps it to one
    pass. The Trainer's evaluate() runs where the real run's does (inside its training loop, after an optimizer step),
    closer to the user's run than an evaluate() called after train() returns, when the training loader is gone."""
    if settings is None:
        return [], None, None
    batch = int(config.get("per_device_eval_batch_size") or 8)
    own = config.get("max_evaluate_steps")
    steps = evaluation_steps(settings.accumulation_steps, int(own) if own not in (None, "") else None)
    return (["do_eval=true", 'evaluation_strategy="steps"', f"eval_steps={STEPS}", f"max_evaluate_steps={steps}"],
            batch, f"the Trainer evaluates once, after step {STEPS}, at batch {batch} (evaluation_strategy=\"steps\" "
                   f"eval_steps={STEPS} max_evaluate_steps={steps})")


def tool_run(request: VerifyRequest) -> ToolRun | str:
    """The workflow on the tuned file, bounded; its CPU equivalents said. A command the user names runs instead."""
    if request.command:
        return user_run(request, "PaddleFormers command", "paddleformers.trainer")
    ranks = request.strategy.ranks  # every data-parallel rank's tensor-parallel ranks
    if ranks > 1:
        return (f"the workflow trains it on {ranks} ranks, and vramtune runs it on one process only yet: name the "
                "launch that trains it to verify it, --verify-with \"python -m paddle.distributed.launch "
                f"--nproc_per_node {ranks} -m paddleformers.cli.launcher train {{file}}\"")
    if request.spec.model.stage in keys.VL_STAGES and request.device.kind == "cpu":
        return keys.VL_NOT_VERIFIED
    spec, notes = request.spec, []
    config = read_config(request.tuned_file)
    kept, _ = given_overrides(config, spec.model.arguments, set(tuned_keys({}, Tuned(strategy=request.strategy))))
    overrides = list(kept)
    if request.device.kind == "cpu":
        equivalents = cpu_equivalents({**config, **spec.model.arguments})
        overrides += [f"{key}={value_text(value)}" for key, value in equivalents.items()]
        if equivalents:
            notes.append("run with the CPU equivalents the probes ran: " + ", ".join(
                f"{key}: {value_text(value)}" for key, value in equivalents.items()))
    evaluation, eval_batch, said = evaluated(spec.settings.get("evaluation"), {**config, **spec.model.arguments})
    notes += [said] if said else []
    argv = [sys.executable, "-m", "paddleformers.cli.launcher", "train", str(request.tuned_file), *overrides,
            *bounded(str(request.scratch)), *evaluation]
    return ToolRun(TOOL, argv, os.getcwd(), {"VRAMTUNE_VERIFY_TRAINER": "paddleformers.trainer"}, notes, eval_batch)
