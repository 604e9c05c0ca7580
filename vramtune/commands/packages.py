"""Before any probe: the packages that build the spec's model are importable where the probes run (the real
backend's children run this Python)."""
from __future__ import annotations

import importlib.util
import re
import sys
from importlib import metadata

from vramtune.estimating.answer import installed_paddle
from vramtune.plugins import SOURCES
from vramtune.probing.runner import Backend, ChildBackend
from vramtune.spec import Problem, Spec, SpecError


def require(spec: Spec, backend: Backend) -> None:
    """The packages the spec's model source imports (Source.modules), found without importing them: a missing one is
    bad input said once, not every probe crashing alike. Paddle itself is the device's to report (`describe` says
    how to install it); a backend of fake devices (the tests') builds no model."""
    if not isinstance(backend, ChildBackend):
        return
    packages = dict.fromkeys(module.partition(".")[0] for module in SOURCES[spec.source].modules)
    missing = [package for package in packages if package != "paddle" and importlib.util.find_spec(package) is None]
    if not missing:
        return
    paddle = installed_paddle()
    raise SpecError([Problem(spec.path, "", f"its {spec.source} model is built with {', '.join(missing)}, which this "
                             f"Python cannot import ({sys.executable}{f', Paddle {paddle}' if paddle else ''}): "
                             f"{install(missing)} beside a Paddle it supports, see docs/environments.md (in a clone: "
                             ".venv26 has PaddleNLP on Paddle 2.6, .venv PaddleFormers on Paddle 3)")])


def install(packages: list[str]) -> str:
    """How to install the packages: vramtune's extras that require them (`pip install 'vramtune[nlp]'`)."""
    wanted = {package.replace("_", "-").lower() for package in packages}
    try:
        requirements = metadata.requires("vramtune") or []
    except metadata.PackageNotFoundError:  # run from a source tree
        requirements = []
    extras: list[str] = []
    for requirement in requirements:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].replace("_", "-").lower()
        extra = re.search(r'extra == "([^"]+)"', requirement)
        if name in wanted and extra and extra.group(1) not in extras:
            extras.append(extra.group(1))
    return f"pip install 'vramtune[{','.join(extras)}]'" if extras else f"install {', '.join(packages)}"
