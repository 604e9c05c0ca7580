"""A PaddleNLP arguments file is trained by the user's own script (PaddleNLP's llm/run_finetune.py, or a Trainer
script of their own): verified by the command they name (`--verify-with "python run_finetune.py {file}"`) on a
bounded copy of the tuned file (a few optimizer steps, nothing saved, its output in a scratch folder), the Trainer's
peak read where its train() runs."""
from __future__ import annotations

import json

from vramtune.core.verification import STEPS, ToolRun, VerifyRequest
from vramtune.dialects.verify_with import user_run

BOUNDED = {"max_steps": STEPS, "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True}


def tool_run(request: VerifyRequest) -> ToolRun | str:
    arguments = json.loads(request.tuned_file.read_text(encoding="utf-8"))
    bounded = request.scratch / request.tuned_file.name
    bounded.write_text(json.dumps({**arguments, **BOUNDED, "output_dir": str(request.scratch / "output")}, indent=2),
                       encoding="utf-8")
    return user_run(request, "PaddleNLP Trainer script", "paddlenlp.trainer", str(bounded))
