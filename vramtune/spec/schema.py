"""The spec's top level: the records a validated spec becomes, and the reader that builds them. The model
source reads `model:`/`data:`, each mechanism reads its own keys (mostly under `search:`)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vramtune.core.reading import Problem, Section, Sections, SpecError, describe, positive
from vramtune.core.spec import ProbeSettings, Spec, TrainSettings, ranks
from vramtune.core.units import SizeError, parse_size
from vramtune.plugins import MECHANISMS, SOURCES

OPTIMIZERS = ("adamw", "adam", "sgd", "momentum")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|gpu|gpu:\d+)$")


def _read_budget(root: Section) -> int | None:
    root.seen.add("budget")
    value = root.data.get("budget", "auto")
    if value == "auto":
        return None
    try:
        return parse_size(value)
    except SizeError as error:
        root.fail("budget", f"{error} (or 'auto' on a GPU)")
        return None


def _read_model(root: Section, model: Section | None, data: Section | None) -> tuple[str | None, Any]:
    """(source name, the source's settings); the source reads both model: and data:."""
    if model is None:
        if data is not None:
            data.skip_rest()
        return None, None
    name = model.get("source", str, choices=tuple(SOURCES))
    settings = None
    if name:
        settings = SOURCES[name].read(model, data or Section([], "", "", {}))
    else:  # the source is already reported; its keys cannot be judged
        model.skip_rest()
        if data is not None:
            data.skip_rest()
    return name, settings


def spec_from_dict(raw: Any, file: str = "<spec>") -> Spec:
    """Validate a parsed spec; raise SpecError listing every problem."""
    problems: list[Problem] = []
    if not isinstance(raw, dict):
        raise SpecError([Problem(file, "", f"must be a mapping, got {describe(raw)}")])
    root = Section(problems, file, "", raw)
    name = root.get("name", str, Path(file).stem)
    model, data = root.sub("model", required=True), root.sub("data", required=True)
    source, settings = _read_model(root, model, data)

    section = root.sub("train", required=True)
    train = TrainSettings(target_batch=0)
    if section is not None:
        train = TrainSettings(
            target_batch=section.get("target_batch", int, check=positive(1 << 20)),
            optimizer=section.get("optimizer", str, "adamw", choices=OPTIMIZERS),
            learning_rate=section.get("learning_rate", float, 5.0e-5, check=positive()),
            max_grad_norm=section.get("max_grad_norm", float, None, check=positive()),
        )

    device = root.get("device", str, "auto", check=lambda v: None if DEVICE_PATTERN.match(v) else
                      f"must be auto, cpu, gpu or gpu:N, got {v!r}")
    budget = _read_budget(root)
    headroom = root.get("headroom", float, 0.05,
                        check=lambda v: None if 0 <= v < 0.9 else f"must be in [0, 0.9), got {v}")
    sections = Sections(root, model or _unread(), section or _unread(), root.sub("search"))
    mechanisms = {mechanism.name: mechanism.read(sections) for mechanism in MECHANISMS}
    for part in (model, data, section, sections.search):
        if part is not None:
            part.finish()

    section = root.sub("probe")
    probe = ProbeSettings(
        steps=section.get("steps", int, 3, check=positive(1000)),
        warmup=section.get("warmup", int, 1, check=positive(1000)),
        timeout=section.get("timeout", float, 300.0, check=positive()),
    )
    section.finish()
    tuned = root.get("tuned", dict, None)
    root.finish()

    accumulation, devices = mechanisms["accumulation"], ranks(mechanisms)
    if train.target_batch and devices and train.target_batch % devices:
        problems.append(Problem(file, "train.target_batch", f"{train.target_batch} cannot be shared by {devices} "
                                                            "devices: it must be a multiple of them"))
    elif train.target_batch and devices and not accumulation.candidates(train.target_batch // devices):
        allowed = f"micro_batches {accumulation.micro_batches}" if accumulation.micro_batches else "any micro-batch"
        problems.append(Problem(file, "train.target_batch", (
            f"{train.target_batch} cannot be reached: no micro-batch in {allowed} divides it "
            f"with accumulation <= {accumulation.max_accumulation}")))
    if problems:
        raise SpecError(problems)
    return Spec(name=name, source=source, model=settings, train=train, device=device, budget=budget,
                headroom=headroom, settings=mechanisms, probe=probe, tuned=tuned, path=file, raw=raw)


def _unread() -> Section:
    """A stand-in for a section already reported missing: its keys cannot be judged."""
    return Section([], "", "", {})


def default_settings() -> dict[str, Any]:
    """Every mechanism's settings as an empty spec gives them (its defaults)."""
    empty = Sections(_unread(), _unread(), _unread(), _unread())
    return {mechanism.name: mechanism.read(empty) for mechanism in MECHANISMS}
