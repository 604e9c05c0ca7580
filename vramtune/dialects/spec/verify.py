"""vramtune's own spec is trained by the user's own loop through vramtune.runtime: verified by the command they name
(`--verify-with "python train.py {file} --steps 3"`)."""
from __future__ import annotations

from vramtune.core.verification import ToolRun, VerifyRequest
from vramtune.dialects.verify_with import user_run


def tool_run(request: VerifyRequest) -> ToolRun | str:
    return user_run(request, "training loop (vramtune.runtime)")
