"""A PaddleNLP arguments file is trained by the user's own script (PaddleNLP's llm/run_finetune.py, or a Trainer
script of their own): verified by the command they name (`--verify-with "python run_finetune.py {file}"`) on a
bounded copy of the tuned file (a few optimizer steps, nothing saved, its output in a scratch folder), the Trainer's
peak read where its train() runs. Where the file evaluates, the copy has the Trainer evaluate once, in its training
loop after the last bounded step (`evaluation_strategy: "steps"`, `eval_steps: 3`: the training state resident and
the training loader reading ahead, as where the real run evaluates), for a few evaluation steps
(`max_evaluate_steps`); its peak read around the Trainer's evaluate()."""
from __future__ import annotations

import dataclasses
import json

from vramtune.core.verification import STEPS, ToolRun, VerifyRequest, evaluation_steps
from vramtune.dialects.verify_with import user_run

BOUNDED = {"max_steps": STEPS, "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True}


def evaluated(settings, arguments: dict) -> dict:
    """The keys that make the Trainer evaluate once after the bounded steps (none where the file does not evaluate:
    `settings`, the evaluation mechanism's, None)."""
    if settings is None:
        return {}
    steps = evaluation_steps(settings.accumulation_steps, arguments.get("max_evaluate_steps"))
    return {"do_eval": True, "evaluation_strategy": "steps", "eval_steps": STEPS, "max_evaluate_steps": steps}


def tool_run(request: VerifyRequest) -> ToolRun | str:
    arguments = json.loads(request.tuned_file.read_text(encoding="utf-8"))
    bounded = request.scratch / request.tuned_file.name
    evaluation = evaluated(request.spec.settings.get("evaluation"), arguments)
    bounded.write_text(json.dumps({**arguments, **BOUNDED, **evaluation, "output_dir": str(request.scratch / "output")},
                                  indent=2), encoding="utf-8")
    run = user_run(request, "PaddleNLP Trainer script", "paddlenlp.trainer", str(bounded))
    if isinstance(run, str) or not evaluation:
        return run
    batch = int(arguments.get("per_device_eval_batch_size") or 8)
    return dataclasses.replace(run, eval_batch=batch, notes=[
        *run.notes, f"the Trainer evaluates once, after step {STEPS}, at batch {batch} (the copy's evaluation_strategy "
                    f"\"steps\", eval_steps {STEPS}, max_evaluate_steps {evaluation['max_evaluate_steps']})"])
