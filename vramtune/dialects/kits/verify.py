"""The answer verified by the kit's own tools/train.py (issue 36): the tuned file trained from the kit's checkout
with the overrides it records for `check` (the user's -O options that set no tuned key), the weights the probes left
out left out (random weights: the same bytes, and no download), its output in a scratch folder, and on a CPU what the
kit needs to train there; the verification hook ends it after 3 optimizer steps. Where the config evaluates and the
kit can be made to evaluate right after those steps (PaddleOCR: `Global.eval_batch_step=[0,3]`), it does, once, and the
hook ends it after that evaluation, read apart. It trains on the user's own data: where the config's training data is
not in the checkout, it does not run, and says so."""
from __future__ import annotations

import sys
from pathlib import Path

from vramtune.core.verification import STEPS, ToolRun, VerifyRequest
from vramtune.dialects.kits import KITS, export
from vramtune.dialects.kits.config import Kit, KitError, get_key
from vramtune.dialects.recorded import recorded_options
from vramtune.dialects.verify_with import user_run
from vramtune.dialects.yaml_file import read_yaml


def missing_data(kit: Kit, config: dict, checkout: Path) -> list[str]:
    """The config's training data not found from the checkout, as "key: path"."""
    missing = []
    for key in kit.data_keys:
        value = get_key(config, key)
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, str) and path and not (checkout / path).exists():
                missing.append(f"{key}: {path}")
    return missing


def tool_run(request: VerifyRequest) -> ToolRun | str:
    spec = request.spec
    kit = KITS[spec.source]
    if request.command:
        return user_run(request, f"{kit.title} command")
    tuned, checkout = request.tuned_file, Path(spec.model.checkout)
    given = recorded_options(tuned.read_text(encoding="utf-8"))
    options = given + [option for option in spec.model.probe_options
                       if option.partition("=")[0] not in {kept.partition("=")[0] for kept in given}]
    once = kit.evaluated_once(STEPS) if spec.settings.get("evaluation") is not None else None
    if once:  # its own evaluation, right after the last bounded step
        keys = {option.partition("=")[0] for option in once[0]}
        options = [option for option in options if option.partition("=")[0] not in keys] + once[0]
    try:
        merged = kit.merged(read_yaml(tuned), tuned, options, checkout)
        missing = missing_data(kit, merged, checkout)
    except KitError as error:
        return f"{kit.title} cannot read the tuned file: {error}"
    if missing:
        return (f"{kit.title}'s tools/train.py trains on the config's own data, which is not in {checkout} "
                f"({'; '.join(missing)}): give its place with -O, or name a run of your own with --verify-with")
    scratch = str(request.scratch / "output")  # its logs and checkpoints: not in the user's folders
    options += [f"{kit.output_option}={scratch}"] if kit.output_option else []
    argv = [sys.executable, "tools/train.py", *export.train_arguments(kit, options, str(tuned), request.device.kind),
            *([kit.output_flag, scratch] if kit.output_flag else [])]
    env = {"VRAMTUNE_VERIFY_STEPS": str(STEPS), **({"PYTHONPATH": str(checkout)} if kit.environment(str(checkout))
                                                   else {}), **({"VRAMTUNE_VERIFY_EVALUATE": once[1]} if once else {})}
    stopped = (f"stopped after {STEPS} optimizer steps" if not once else
               f"stopped after {STEPS} optimizer steps and the evaluation that follows them ({' '.join(once[0])}), "
               f"over the whole Eval set")
    if spec.settings.get("evaluation") is not None and not once:
        stopped += (f"; the config's evaluation comes after them ({kit.title} evaluates at an epoch's end, which "
                    "a few steps do not reach): its evaluation is the probe's alone")
    eval_batch = get_key(merged, once[2]) if once else None
    return ToolRun(f"{kit.title}'s tools/train.py", argv, str(checkout), env,
                   [f"{stopped}; the weights the probes left out left out (the same bytes)"]
                   if spec.model.probe_options else [stopped], int(eval_batch) if eval_batch else None)
