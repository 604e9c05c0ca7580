"""The key list vramtune checks PaddleFormers configs against is the installed PaddleFormers' own (the init fields of
the argument classes `paddleformers-cli train` parses), and every key vramtune names exists there."""
from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import HUNG, needs_paddleformers

from vramtune.core.report import Tuned
from vramtune.core.strategy import Strategy
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.accepted import ACCEPTED, ARGUMENT_CLASSES, VERSION
from vramtune.dialects.paddleformers.codec import FORMERS_DEFAULTS, FORMERS_KEYS
from vramtune.dialects.paddleformers.export import tuned_keys

pytestmark = [pytest.mark.paddle, needs_paddleformers]

INSTALLED = """
import dataclasses, json
from importlib import metadata
from paddleformers.cli.hparams.parser import _TRAIN_ARGS
print(json.dumps({"version": metadata.version("paddleformers"), "classes": {
    c.__name__: sorted(f.name for f in dataclasses.fields(c) if f.init) for c in _TRAIN_ARGS}}))
"""


def test_the_accepted_keys_are_the_installed_parsers():
    import json

    done = subprocess.run([sys.executable, "-c", INSTALLED], capture_output=True, text=True, timeout=HUNG)
    installed = json.loads(done.stdout.strip().splitlines()[-1])
    assert installed["version"] == VERSION
    assert installed["classes"] == {name: list(fields) for name, fields in ARGUMENT_CLASSES.items()}


def test_every_key_vramtune_names_is_a_paddleformers_key():
    """The refusals, what the reader reads, and every key the dialect writes back, leaves to the search or takes
    PaddleFormers' default of."""
    written = tuned_keys({}, Tuned(Strategy(precision="bf16-o2", micro_batch=2, accumulation=4, recomputed_blocks=2),
                                   device_kind="gpu"))
    named = {*keys.REFUSED, *written, *FORMERS_KEYS, *FORMERS_DEFAULTS,
             "compute_type", "stage", "max_seq_len", "packing", "padding_free", "_attn_implementation", "fine_tuning",
             "lora_rank", "sharding", "sharding_parallel_size", "sharding_offload_opt_buffersize_GB"}
    assert {"per_device_train_batch_size", "recompute_num_layers", "fp16_opt_level"} <= set(written)
    assert named <= ACCEPTED
