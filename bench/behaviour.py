"""Behaviour snapshot of the CLI: every command on every shipped config and test spec, over fake devices, as one
deterministic text, to prove that a change (a refactor) leaves behaviour unchanged.

Run it with the project's environment; the snapshot goes to stdout, progress to stderr (about 2-3 minutes):

    PYTHONPATH=$REPO:$REPO/tests $REPO/.venv/bin/python $REPO/bench/behaviour.py > before.txt

Run it again on the changed code (same command, that checkout's path as $REPO) and compare the two:

    diff -u before.txt after.txt        # no output: the same behaviour; any line is a change to explain

Each case is a file at three budgets on the default FakeDevice of tests/fakes.py (fits easily / needs accumulation
or recompute / nothing fits): configs/*.yaml, tests/specs/*.yaml, the PaddleFormers config on each model folder of
tests/specs/formers, and the kit configs the kit tests use, with their -O overrides (copied into a temporary checkout
of symlinks into ../shared/kits, or $VRAMTUNE_KITS, which is never written; a kit not there is listed at the end as not
covered). A few files run again on
one GPU-shaped fake card (fakes.gpu_shapes()). Each case runs `validate` (once a file), `probe --budget B` (human and
--json), `apply --budget B -o TMP` (then the file it wrote), `check` on that file (with the arguments its budget
comment names) and `estimate --card B`. The model folders and config.json files under tests/specs run `estimate` at
three cards (--json at one) and `validate` and `probe` once (what they say to a folder). Every command's exit code,
stdout and stderr are recorded, with what varies between runs replaced: the temporary and repository paths (<TMP>,
<REPO>, <KITS>), wall times (<T>), dates (<DATE>), version strings (<VERSION>). Each case has its own results cache
and locks (VRAMTUNE_CACHE, VRAMTUNE_LOCKS), as each test has in tests/conftest.py. No real probe runs: the fake
backend answers them (a PaddleFormers config still tokenizes its data in a child, once a command).

It imports nothing of vramtune but `make_app` (below: the one line to change if it moves), and from tests/fakes.py
FakeBackend, FakeDevice and gpu_shapes.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout's vramtune and tests/fakes.py first

from fakes import FakeBackend, FakeDevice, gpu_shapes  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from vramtune.cli import make_app  # noqa: E402  (the one line to change if make_app moves)

KITS = Path(os.environ.get("VRAMTUNE_KITS", REPO.parent / "shared" / "kits"))

# The default FakeDevice: 20 MiB of state, 2 MiB per sample (fp32), a recomputed block saves 0.3 MiB per sample.
EASY, NONE = "64GiB", "16MiB"  # the whole target batch fits at once; the state alone is over the budget
TIGHT = "49MiB"  # large targets: accumulation (m <= 13 fits); mlp-python-cpu's 2048 needs recompute (m=32 r=4)
TIGHT_SMALL = "26MiB"  # targets of 4 to 8: m=2 fits, plain does not


@dataclass
class Case:
    name: str
    file: str  # as given on the command line (relative to the repository root, or in the temporary folder)
    tight: str = TIGHT
    options: list[str] = field(default_factory=list)  # the file's own overrides (-O KEY=VALUE), for every command
    flags: list[str] = field(default_factory=list)  # probe, apply and check only (e.g. --device cpu)
    budgets: tuple[str, ...] = ()  # default: (EASY, tight, NONE)


# the budgets a file needs to accumulate or recompute (its target batch, search settings), or to fit nothing
SPEC_BUDGETS = {
    "configs/formers-sft-lora-cpu.yaml": (EASY, TIGHT_SMALL, NONE),  # target 4
    "tests/specs/rung-accumulation.yaml": (EASY, "96MiB", NONE),  # target 2048, recompute off: m=32 k=64 (84 MiB)
    "tests/specs/rung-recompute.yaml": (EASY, "1GiB", NONE),  # target 2048, max_accumulation 2: m=1024 recomputed
    "tests/specs/two-ranks.yaml": (EASY, TIGHT, "8MiB"),  # sharding stage 1 halves the optimizer state per rank
}

# The kit configs tests/kits/ runs through the CLI, with the overrides the tests give them. Each is copied into a
# temporary checkout of the kit (kit_checkout), so that apply writes beside it and check finds the kit.
KIT_CASES = [
    # (kit, config, options, tight budget)
    ("PaddleOCR", "configs/rec/PP-OCRv5/PP-OCRv5_mobile_rec.yml", ["Train.sampler.first_bs=8"], TIGHT_SMALL),
    ("PaddleOCR", "configs/rec/PP-OCRv3/en_PP-OCRv3_mobile_rec.yml",
     ["Global.use_ema=true", "Train.loader.batch_size_per_card=8"], TIGHT_SMALL),
    ("PaddleClas", "ppcls/configs/ImageNet/VisionTransformer/ViT_base_patch16_224.yaml",
     ["DataLoader.Train.sampler.batch_size=8", "Global.epochs=1"], TIGHT_SMALL),
    ("PaddleClas", "ppcls/configs/ImageNet/ResNet/ResNet50.yaml",
     ["DataLoader.Train.dataset.transform_ops.1.RandCropImage.size=32", "Arch.class_num=10",
      "DataLoader.Train.sampler.batch_size=32", "Global.eval_during_train=False"], TIGHT),
    ("PaddleSeg", "configs/quick_start/pp_liteseg_optic_disc_512x512_1k.yml", [], TIGHT_SMALL),
    ("PaddleDetection", "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml", ["epoch=1"], TIGHT_SMALL),  # _BASE_ files
]

# model folders and config.json files: estimate only (counted from config.json), at these cards
FOLDER_CARDS = ("80GiB", "24GiB", "1GiB")
TINY_FOLDER_CARDS = ("64MiB", "24MiB", "1MiB")

# one GPU-shaped fake card (BERT-base seq 512 on an A100 40GB: 1.8 GB of state, 0.7 GB per sample in fp32), for
# resnet50.yaml, the PaddleFormers config (device=gpu) and PaddleClas's ViT (as tests/kits/test_kit_check.py)
GPU_SHAPE = 0
GPU_BUDGETS = ("40GiB", "4GiB", "1GiB")
GPU_KIT = 2


class Snapshot:
    """The snapshot's lines, and what is replaced in them (paths: (text, placeholder), longest first)."""

    def __init__(self, root: Path, paths: list[tuple[str, str]]):
        self.root, self.paths, self.lines, self.commands, self.version = root, paths, [], 0, ""

    def emit(self, *lines: str) -> None:
        self.lines.extend(lines)

    def normalise(self, text: str) -> str:
        for path, token in self.paths:
            text = text.replace(path, token)
        text = re.sub(r"\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d+)?)?)?", "<DATE>", text)
        # wall times: "in 0.1s", "(0.0s)", a probe line's last column, "seconds": 0.12 in JSON
        text = re.sub(r"(?m)^(  \[\s*\d+\] .*\S)\s+\d+(\.\d+)?s( \(saved\))?$", r"\1 <T>s\3", text)
        text = re.sub(r"\b(in|took|after) \d+(\.\d+)?\s?(s|ms|min)\b", r"\1 <T>\3", text)
        text = re.sub(r"(\(|, )\d+(\.\d+)?s\)", r"\1<T>s)", text)
        text = re.sub(r'"(seconds|wall_seconds|elapsed|started|finished|timings)": [-\d.e+]+', r'"\1": "<T>"', text)
        text = re.sub(r'"(\w*version)": "[^"]*"', r'"\1": "<VERSION>"', text)
        if self.version:
            text = text.replace(f'"vramtune": "{self.version}"', '"vramtune": "<VERSION>"')
            text = text.replace(f"vramtune {self.version}", "vramtune <VERSION>")
        return text

    def block(self, label: str, text: str) -> None:
        text = self.normalise(text)
        self.emit(f"--- {label}" + ("" if text else " (empty)"))
        if text:
            self.emit(*text.rstrip("\n").split("\n"))
            if not text.endswith("\n"):
                self.emit("(no newline at end)")


def invoker(app):
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(app, [str(a) for a in args], catch_exceptions=True)
        raised = None
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raised = f"{type(result.exception).__name__}: {result.exception}"
        return result.exit_code, result.stdout, result.stderr, raised
    return invoke


def run(snap: Snapshot, invoke, *args: str) -> int:
    shown = " ".join(shlex.quote(snap.normalise(str(a))) for a in args)
    print(f"  vramtune {shown}", file=sys.stderr, flush=True)
    code, out, err, raised = invoke(*args)
    snap.commands += 1
    snap.emit("", f"$ vramtune {shown}", f"exit {code}")
    if raised:
        snap.emit(f"raised {snap.normalise(raised)}")
    snap.block("stdout", out)
    snap.block("stderr", err)
    return code


def private(snap: Snapshot, case: str) -> Path:
    """A case's own folder, results cache and device locks."""
    folder = snap.root / "cases" / re.sub(r"[^\w.-]+", "_", case)
    folder.mkdir(parents=True)
    os.environ["VRAMTUNE_CACHE"] = str(folder / "cache")
    os.environ["VRAMTUNE_LOCKS"] = str(folder / "locks")
    return folder


def check_arguments(written: Path) -> list[str]:
    """What the budget comment apply wrote says to run check with (`vramtune check FILE -O K=V`), else nothing."""
    first = written.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
    found = re.search(r"`vramtune check FILE(.*?)`", first)
    return shlex.split(found.group(1)) if found else []


def file_case(snap: Snapshot, device_name: str, device_factory, case: Case) -> None:
    budgets = case.budgets or (EASY, case.tight, NONE)
    snap.emit("", "=" * 100, f"### {case.name} on {device_name}: {snap.normalise(case.file)}",
              f"### overrides {case.options or '-'}; flags {case.flags or '-'}; budgets {', '.join(budgets)}")
    options = [part for option in case.options for part in ("-O", option)]
    invoke = invoker(make_app(FakeBackend(device_factory())))
    private(snap, f"{device_name}-{case.name}-validate")
    run(snap, invoke, "validate", case.file, *options)
    for budget in budgets:
        snap.emit("", f"## {case.name} on {device_name} at {budget}")
        folder = private(snap, f"{device_name}-{case.name}-{budget}")
        invoke = invoker(make_app(FakeBackend(device_factory())))  # a fresh device: its calls are per case
        given = [*options, *case.flags]
        run(snap, invoke, "probe", case.file, "--budget", budget, *given)
        run(snap, invoke, "probe", case.file, "--budget", budget, "--json", *given)
        source = Path(case.file)
        out = (source.parent if source.is_absolute() else folder) / f"{source.stem}.tuned-{budget}{source.suffix}"
        if not inside(snap.root, out) or os.path.lexists(out):
            raise SystemExit(f"refusing to write {out}: not a new file in {snap.root}")
        run(snap, invoke, "apply", case.file, "--budget", budget, "-o", out, *given)
        if out.is_file():
            snap.block(f"file written: {snap.normalise(str(out))}", out.read_text(encoding="utf-8", errors="replace"))
            run(snap, invoke, "check", out, *check_arguments(out), *case.flags)
        else:
            snap.emit("--- apply wrote no file: check not run")
        run(snap, invoke, "estimate", case.file, "--card", budget, *options)


def folder_case(snap: Snapshot, path: str, cards: tuple[str, ...]) -> None:
    snap.emit("", "=" * 100, f"### {path}: estimate at {', '.join(cards)} (--json at {cards[1]}); validate, probe")
    invoke = invoker(make_app(FakeBackend(FakeDevice())))
    private(snap, f"folder-{path}")
    run(snap, invoke, "validate", path)  # what the other commands say to a model folder or a config.json
    run(snap, invoke, "probe", path, "--budget", cards[1])
    for card in cards:
        private(snap, f"folder-{path}-{card}")
        run(snap, invoke, "estimate", path, "--card", card)
        if card == cards[1]:  # the rows' bytes are the same on every card: one --json
            run(snap, invoke, "estimate", path, "--card", card, "--json")


def kit_checkout(root: Path, kit: str, config: str) -> Path | None:
    """A temporary checkout of the kit whose folders down to the config are real, each of their other entries a
    symlink into the kit, and the config a copy: apply writes beside it (where its _BASE_ paths still resolve) and
    never into the kit's checkout."""
    source = KITS / kit
    if not (source / "tools" / "train.py").is_file():
        return None
    parts = Path(config).parts
    for depth in range(len(parts)):  # the checkout, then each folder down to the config's
        here, there = root / "kits" / kit / Path(*parts[:depth]), source / Path(*parts[:depth])
        if here.is_symlink():  # another config's sibling so far: made real now
            here.unlink()
        here.mkdir(parents=True, exist_ok=True)
        for entry in sorted(there.iterdir()):
            if entry.name != parts[depth] and not os.path.lexists(here / entry.name):
                (here / entry.name).symlink_to(entry)
    copy = root / "kits" / kit / config
    if not copy.exists():
        shutil.copyfile(source / config, copy)
    return copy


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, its symlinks followed, is in the temporary folder (nothing is written anywhere else)."""
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


def main() -> int:
    started = time.monotonic()
    os.chdir(REPO)  # the shipped configs name their data relative to the repository root
    root = Path(tempfile.mkdtemp(prefix="vramtune-snap-"))
    paths = {(str(root.resolve()), "<TMP>"), (str(root), "<TMP>"), (str(KITS.resolve()), "<KITS>"),
             (str(KITS), "<KITS>"), (str(REPO), "<REPO>"), (str(REPO.resolve()), "<REPO>")}
    snap = Snapshot(root, sorted(paths, key=lambda pair: (-len(pair[0]), pair)))
    # as tests/conftest.py: the example and fault factories on PYTHONPATH (children and apply's import check)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "configs"), str(REPO / "tests" / "faults"),
                                                             os.environ.get("PYTHONPATH")]))
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the kits' checkouts (children, and here:)
    sys.dont_write_bytecode = True
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    version = invoker(make_app(FakeBackend(FakeDevice())))("--version")[1].strip()
    snap.version = version.removeprefix("vramtune ").strip()
    snap.emit("# vramtune behaviour snapshot (bench/behaviour.py)", f"# {snap.normalise(version)}")
    skipped = []
    try:
        specs = [*(REPO / "configs").glob("*.yaml"), *(REPO / "tests/specs").glob("*.yaml")]
        cpu_cases = [Case(path, path, budgets=SPEC_BUDGETS.get(path, ()))
                     for path in sorted(str(p.relative_to(REPO)) for p in specs)]
        # the PaddleFormers config on each model folder of tests/specs/formers (llama is the shipped config's own); a
        # folder without a tokenizer is given no training data, as tests/formers/ gives it
        for model in sorted(p for p in (REPO / "tests/specs/formers").iterdir() if (p / "config.json").is_file()):
            if model.name != "llama":
                data = [] if (model / "tokenizer_config.json").is_file() else ["train_dataset_path=null"]
                cpu_cases.append(Case(f"configs/formers-sft-lora-cpu.yaml on {model.name}",
                                      "configs/formers-sft-lora-cpu.yaml", TIGHT_SMALL,
                                      [f"model_name_or_path=./tests/specs/formers/{model.name}", *data]))
        for kit, config, options, tight in KIT_CASES:
            path = kit_checkout(root, kit, config)
            if path is None:
                skipped.append(f"{kit}/{config}: no checkout in {KITS}")
                continue
            cpu_cases.append(Case(f"{kit}/{config}", str(path), tight, options, ["--device", "cpu"]))
        for case in cpu_cases:
            print(f"{case.name} ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)
            file_case(snap, "fake cpu", FakeDevice, case)

        shape = gpu_shapes()[GPU_SHAPE]
        gpu_name = f"fake gpu '{shape.name}'"
        gpu_cases = [Case("configs/resnet50.yaml", "configs/resnet50.yaml", budgets=GPU_BUDGETS),
                     Case("configs/formers-sft-lora-cpu.yaml", "configs/formers-sft-lora-cpu.yaml",
                          options=["device=gpu"], budgets=GPU_BUDGETS)]
        kit, config, options, _ = KIT_CASES[GPU_KIT]
        path = kit_checkout(root, kit, config)
        if path is not None:
            gpu_cases.append(Case(f"{kit}/{config}", str(path), options=options, budgets=GPU_BUDGETS))
        for case in gpu_cases:
            print(f"{case.name} on the gpu ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)
            # gpu_shapes() builds new devices: each case gets its own
            file_case(snap, gpu_name, lambda: gpu_shapes()[GPU_SHAPE].device, case)

        folders = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests/specs/configs").glob("*.json"))
        tiny = sorted(str(p.parent.relative_to(REPO)) for p in (REPO / "tests/specs").glob("**/config.json"))
        for path in folders:
            folder_case(snap, path, FOLDER_CARDS)
        for path in tiny:
            folder_case(snap, path, TINY_FOLDER_CARDS)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    snap.emit("", "=" * 100, f"# {snap.commands} commands",
              *(f"# not covered: {snap.normalise(line)}" for line in skipped))
    sys.stdout.write("\n".join(snap.lines) + "\n")
    print(f"{snap.commands} commands in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
