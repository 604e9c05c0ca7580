"""PaddleFormers 1.x: the config `paddleformers-cli train` takes, read as a spec (reading.py, against the keys its
parser accepts: accepted.py; what vramtune does with each memory key: keys.py); its models built in the probe child
as its SFT workflow builds them (source.py, building.py), at the sequence length its data reaches (lengths.py);
`apply` writes the same file back (export.py)."""
from __future__ import annotations

import vramtune.sources  # noqa: F401  the source registry imports this dialect's source: load it first
