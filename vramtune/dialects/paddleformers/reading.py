"""A PaddleFormers 1.x config — the flat YAML or JSON file `paddleformers-cli train` takes, with its `key=value`
overrides — read as a spec.

Every key is checked against the keys PaddleFormers' parser accepts (accepted.py): any other key is named, as the
parser would reject it. The keys that decide the run are read here (the model folder, stage, LoRA, sequence length,
batch, learning rate, gradient clipping); the keys of precision, sharding, to_static and evaluation are read by
codec.py (`from_formers`: the same meanings as PaddleNLP's keys under this tool's names, e.g. `compute_type` the half
type); a key that changes memory and that nothing measures is refused by name (keys.py). Everything else is kept
untouched for `vramtune apply`. The target batch is per_device_train_batch_size x gradient_accumulation_steps.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vramtune.core.files import cache_root
from vramtune.core.reading import Problem, Section, SpecError, positive, read_spec_text
from vramtune.core.text import did_you_mean
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.accepted import ACCEPTED, VERSION
from vramtune.dialects.paddleformers.codec import from_formers
from vramtune.dialects.paddleformers.images import describe
from vramtune.dialects.paddleformers.lengths import longest_sample

# keys only PaddleFormers 1.x has (PaddleNLP 2.8's arguments files have none of them): how a file is recognised
MARKERS = frozenset({"stage", "max_seq_len", "compute_type", "fine_tuning", "train_dataset_path", "train_dataset_type",
                     "_attn_implementation", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                     "sharding_parallel_size", "packing", "padding_free"})
DEFAULT_MAX_SEQ_LEN = 4096  # DataArguments.max_seq_len
DEFAULT_BATCH = 8  # TrainingArguments.per_device_train_batch_size
TRAINER_MAX_GRAD_NORM = 1.0
ROW_SIZES = "augmentation at its worst where the template augments"
DATA_AT_PROBE_TIME = ("the sequence length is read from the training data at probe time (its longest sample kept, "
                      "tokenized by PaddleFormers); not here, which runs no Paddle")


def is_formers_config(data: Any) -> bool:
    """A flat mapping with a key only PaddleFormers 1.x has (a vramtune spec has model:/train: sections)."""
    return (isinstance(data, dict) and not isinstance(data.get("model"), dict)
            and not isinstance(data.get("train"), dict) and bool(MARKERS & set(data)))


def parse_overrides(items: list[str], file: str) -> dict[str, Any]:
    """`key=value` as PaddleFormers' OmegaConf.from_cli reads them: the value as a YAML scalar."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError([Problem(file, "", f"{item!r}: an override is key=value")])
        try:
            overrides[key.strip()] = yaml.safe_load(value) if value else None
        except yaml.YAMLError:
            overrides[key.strip()] = value
    return overrides


def read_config(path: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The file's mapping (YAML, or JSON for .json, as PaddleFormers picks by suffix) with the overrides merged."""
    file, text = str(path), read_spec_text(path)
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise SpecError([Problem(file, "", f"cannot be parsed: {error}")]) from None
    if not isinstance(data, dict):
        raise SpecError([Problem(file, "", "must be a mapping of PaddleFormers arguments")])
    return {**data, **parse_overrides(overrides or [], file)}


def formers_data(path: Path) -> dict[str, Any] | None:
    """The file's mapping when it is a PaddleFormers config (recognised by its keys), else None."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
        return None  # not this dialect's to report: the generic readers say what is wrong
    return data if is_formers_config(data) else None


def formers_spec(path: Path, options: list[str] | None = None, read_data: bool = True) \
        -> tuple[dict[str, Any], list[str]] | None:
    """The raw spec and warnings when the file is a PaddleFormers config, else None. `read_data` False: the training
    data is not tokenized (that runs Paddle); the sequence length is then read at probe time."""
    data = formers_data(path)
    if data is None:
        return None
    return spec_from_config({**data, **parse_overrides(options or [], str(path))}, str(path), read_data)


def _local(section: Section, key: str, value: str, what: str) -> Path | None:
    """A path as PaddleFormers finds it (from the working folder), else next to the file; None when neither."""
    candidates = [Path.cwd() / value, Path(section.file).resolve().parent / value]
    found = next((p.resolve() for p in candidates if p.exists()), None)
    if found is None:
        section.fail(key, f"{value!r}: no such {what} (vramtune never downloads)")
    return found


def _model_folder(section: Section) -> str | None:
    value = section.get("model_name_or_path", str)
    if not value:
        return None
    folder = _local(section, "model_name_or_path", value, "local model folder")
    if folder is not None and not (folder / "config.json").is_file():
        section.fail("model_name_or_path", f"{value!r}: the folder has no config.json (vramtune builds the model "
                                           "from it with random weights; weights are never loaded)")
        return None
    return str(folder) if folder else None


def _datasets(section: Section) -> list[str]:
    """The training data files the file names (comma-separated, as PaddleFormers splits them), all found, or [];
    missing files are not an error (the sequence length is then max_seq_len, an upper bound)."""
    found = []
    for part in (section.get("train_dataset_path", str, "") or "").replace(" ", "").split(","):
        if part:
            candidates = [Path.cwd() / part, Path(section.file).resolve().parent / part]
            match = next((p.resolve() for p in candidates if p.exists()), None)
            if match is None:
                return []
            found.append(str(match))
    return found


def _sequence(section: Section, config: dict[str, Any], folder: str | None, datasets: list[str],
              max_seq_len: int, read_data: bool) -> dict[str, Any]:
    """data: the length the run reaches (max_seq_len with packing, else the longest sample kept) and how it was
    found."""
    if config.get("packing") or config.get("padding_free"):
        return {"seq_len": max_seq_len, "seq_note": f"sequence length {max_seq_len}: max_seq_len (packing fills "
                                                    "every row to it)"}
    if config.get("sequence_parallel") is True:
        return {"seq_len": max_seq_len, "seq_note": f"sequence length {max_seq_len}: max_seq_len (with sequence "
                                                    "parallelism the workflow pads every row to it)"}
    if folder and datasets and not read_data:
        return {"seq_len": max_seq_len, "seq_note": DATA_AT_PROBE_TIME}
    if not (folder and datasets):
        if config.get("stage") == "DPO":
            section.fail("train_dataset_path", "DPO is measured on the training data's longest chosen/rejected pair: "
                                               "the file must name training data that is there")
        return {"seq_len": max_seq_len}
    answer = longest_sample({**config, "train_dataset_path": ",".join(datasets)}, folder, datasets,
                            cache_root() / "formers-lengths")
    if "error" in answer:
        return {"seq_len": max_seq_len, "seq_note": f"sequence length {max_seq_len}: max_seq_len, an upper bound "
                                                    f"(the training data could not be read: {answer['error']})"}
    if "vl" in answer:
        return _vl_sequence(section, answer, max_seq_len)
    if not answer["longest"]:
        section.fail("train_dataset_path", f"every sample is longer than max_seq_len {max_seq_len}: PaddleFormers "
                                           "drops them all (truncation_strategy) and its workflow never ends")
        return {"seq_len": max_seq_len}
    return {"seq_len": answer["longest"],
            "seq_note": f"sequence length {answer['longest']}: the longest of the {answer['kept']} training samples "
                        f"kept (no packing: a batch is padded to its longest row, not to max_seq_len "
                        f"{max_seq_len}): \"{answer['sample']}...\""}


def _vl_sequence(section: Section, answer: dict[str, Any], max_seq_len: int) -> dict[str, Any]:
    """A vision-language stage's data: its worst row (images.py, vl_data.py), or every row deleted, said."""
    if not answer["longest"]:
        section.fail("train_dataset_path", f"every row is longer than max_seq_len {max_seq_len} (its text and image "
                                           "tokens after the template's and processor's resizes, "
                                           f"{ROW_SIZES}): PaddleFormers deletes every row (\"[SKIP] data is deleted "
                                           "by truncation strategy\") and its workflow never ends: raise max_seq_len "
                                           "or lower the images' resolution")
        return {"seq_len": max_seq_len}
    return {"seq_len": answer["longest"], "seq_note": describe(answer["vl"], max_seq_len)}


def spec_from_config(config: dict[str, Any], file: str, read_data: bool = True) -> tuple[dict[str, Any], list[str]]:
    """The raw spec (as a YAML spec would give it) for a PaddleFormers config, and warnings for the user."""
    problems: list[Problem] = []
    warnings: list[str] = []
    unknown = sorted(key for key in config if key not in ACCEPTED)
    for key in unknown:
        problems.append(Problem(file, key, f"PaddleFormers {VERSION}'s parser rejects it (\"Some specified arguments "
                                           f"are not used by the PdArgumentParser\"){did_you_mean(key, ACCEPTED)}"))
    section = Section(problems, file, "", config)
    folder = _model_folder(section)
    stage = section.get("stage", str, "SFT", choices=keys.READ_STAGES)
    seq_len = section.get("max_seq_len", int, DEFAULT_MAX_SEQ_LEN, check=positive(1 << 20))
    micro = section.get("per_device_train_batch_size", int, DEFAULT_BATCH, check=positive(1 << 20))
    accumulation = section.get("gradient_accumulation_steps", int, 1, check=positive(1 << 16))
    learning_rate = section.get("learning_rate", float, 5.0e-5, check=positive())
    max_grad_norm = section.get("max_grad_norm", float, TRAINER_MAX_GRAD_NORM)
    optim = section.get("optim", str, "adamw")
    if optim != "adamw":
        section.fail("optim", f"{optim!r} is not measured by vramtune: tune with optim: adamw")
    strategy = Section([], file, "", config)  # what the file says of the strategy (its problems said last)
    read = list(from_formers(strategy).items())
    for key, value in config.items():
        why = keys.refusal(key, value) if key not in strategy.seen else None  # the codec's keys are checked there
        if why:
            section.fail(key, why)
    datasets = _datasets(section)
    refused = bool(problems or strategy.problems)  # no data pass for a refused file: it would read its bad values
    data = _sequence(section, config, folder, datasets, seq_len or DEFAULT_MAX_SEQ_LEN, read_data and not refused)
    if data.get("seq_note") == DATA_AT_PROBE_TIME:
        warnings.append(DATA_AT_PROBE_TIME)
    warnings += keys.unreached(config)
    raw: dict[str, Any] = {
        "name": Path(file).stem,
        "model": {"source": "paddleformers", "folder": folder, "stage": stage, "arguments": config,
                  "datasets": datasets},
        "data": data,
        "train": {"target_batch": (micro or 1) * (accumulation or 1), "optimizer": "adamw",
                  "learning_rate": learning_rate,
                  **({"max_grad_norm": max_grad_norm} if max_grad_norm and max_grad_norm > 0 else {})},
        "device": "cpu" if config.get("device") == "cpu" else "auto",
        "budget": "auto",
    }
    for dotted, value in read:
        node = raw
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    problems.extend(strategy.problems)
    if problems:
        raise SpecError(problems)
    return raw, warnings
