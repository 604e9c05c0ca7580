"""The longest training sample the SFT workflow keeps, tokenized as it tokenizes (its tokenizer, template and
truncation strategy: a sample longer than max_seq_len is dropped, not cut), over one pass of the training files.

Run in a child (it imports Paddle and PaddleFormers): `python -m vramtune.dialects.paddleformers.lengths ARGS.json`
prints {"longest": tokens, "kept": samples, "sample": the longest one's first words}. The parent calls it through
`longest_sample` and caches the answer by the files it depends on.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vramtune.core.files import write_atomic
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.model import dataset_config, kept_sequences

TIMEOUT = 600  # seconds for one pass over the training data
SHOWN_CHARACTERS = 60


def longest(model_args: Any, data_args: Any, training_args: Any) -> tuple[Any, Any, int]:
    """Child side: (the longest sequence kept, the tokenizer, how many were kept) over one pass of the workflow's
    own dataset."""
    from paddleformers.datasets.template.template import get_template_and_fix_tokenizer
    from paddleformers.transformers import AutoTokenizer

    with contextlib.redirect_stdout(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name_or_path or model_args.model_name_or_path)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token_id = tokenizer.eos_token_id
        config = dataset_config(model_args, data_args, training_args, tokenizer)
        config["template_instance"] = (get_template_and_fix_tokenizer(config) if config["template_backend"] == "custom"
                                       else None)
        found, kept = None, 0
        for sequence in kept_sequences(data_args, config):
            kept += 1
            if found is None or len(sequence.token_ids) > len(found.token_ids):
                found = sequence
    return found, tokenizer, kept


def measure(arguments: dict[str, Any]) -> dict[str, Any]:
    """Child side, for the parent: the longest sample's length and first words; for a vision-language stage, its
    worst row (vl_data.py)."""
    from vramtune.dialects.paddleformers.model import parse

    model_args, data_args, _, _, training_args = parse(arguments)
    if model_args.stage in keys.VL_STAGES:  # the worst row: its images through the template and processor
        from vramtune.dialects.paddleformers.vl_data import worst

        _, row, _ = worst(model_args, data_args, training_args)
        return {"longest": row.get("tokens", 0), "kept": row["kept"], "sample": "", "vl": row}
    found, tokenizer, kept = longest(model_args, data_args, training_args)
    text = tokenizer.decode(found.token_ids[:32]) if found else ""
    return {"longest": len(found.token_ids) if found else 0, "kept": kept,
            "sample": " ".join(text.split())[:SHOWN_CHARACTERS]}


def cache_key(arguments: dict[str, Any], folder: str, datasets: list[str]) -> str:
    """What the answer depends on: the data and tokenizer files and the arguments that shape samples."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode())
    shaping = ("token", "processor", "config.json")
    shaped = sorted(str(p) for p in Path(folder).iterdir() if any(part in p.name for part in shaping))
    for path in [*datasets, *_images(datasets), *shaped]:
        stat = os.stat(path)
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


def _images(datasets: list[str]) -> list[str]:
    """The image files a messages dataset's rows name (their sizes decide a VL row's tokens), as its reader finds
    them (relative to the data file)."""
    found: list[str] = []
    for dataset in datasets:
        try:
            lines = Path(dataset).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            for image in row.get("images", []) if isinstance(row, dict) else []:
                path = Path(dataset).parent / image if isinstance(image, str) else None
                if path is not None and path.is_file():
                    found.append(str(path))
    return found


def longest_sample(arguments: dict[str, Any], folder: str, datasets: list[str], cache: Path) -> dict[str, Any]:
    """Parent side: the longest kept sample, from the cache or a child run (on CPU, with the CPU equivalents of the
    file's GPU-only settings); {"error": ...} when it cannot run."""
    from vramtune.dialects.paddleformers.model import cpu_equivalents

    path = cache / f"{cache_key(arguments, folder, datasets)}.json"
    cached = _cached(path)
    if cached is not None:
        return cached
    arguments = {**arguments, "model_name_or_path": folder, "output_dir": str(cache), "device": "cpu",
                 **cpu_equivalents(arguments), "amp_master_grad": False}
    try:
        done = subprocess.run([sys.executable, "-m", __name__, json.dumps(arguments)], capture_output=True,
                              text=True, timeout=TIMEOUT)
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else \
            {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    except (subprocess.TimeoutExpired, ValueError, IndexError) as error:
        answer = {"error": f"{type(error).__name__}: {error}"[:300]}
    if "error" not in answer:
        cache.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(answer))
    return answer


def _cached(path: Path) -> dict[str, Any] | None:
    """A cached answer; None when there is none or it cannot be read (torn, damaged: measured again)."""
    try:
        answer = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and "longest" in answer else None


if __name__ == "__main__":
    try:
        result = measure(json.loads(sys.argv[1]))
    except Exception as error:  # said to the parent, which falls back to max_seq_len
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result))
