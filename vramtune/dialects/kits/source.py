"""What every kit's model source does and says alike: the child builds under the user's checkout (the kit's code
imported from there; a requirement missing is one message naming the kit's requirements.txt), and the note under
the probe table says the report's m, k and r in the kit's keys."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from vramtune.core.errors import BuildError
from vramtune.dialects.kits.config import kit_import_error, on_path


@contextlib.contextmanager
def kit_code(kit: str, checkout: str) -> Iterator[None]:
    """The checkout first on sys.path while the kit's code is imported and builds (child side); an ImportError there
    is one BuildError saying what to install."""
    with on_path(checkout):
        try:
            yield
        except ImportError as error:
            raise BuildError(str(kit_import_error(kit, checkout, error))) from error


def terms_note(kit: str, batch: str, accumulation: str | None = None, k: str = "k", who: str = "") -> str:
    """The note in the kit's keys: m is `batch`; k is `accumulation`, the kit's key for it, else k (`k`: how the note
    names it) only measures a smaller batch, which `who` (by default the kit) cannot accumulate; no kit recomputes."""
    said = (f", k (accumulation) {accumulation}" if accumulation else
            f"; {k} only measures a smaller batch, which {who or kit} cannot accumulate: apply writes the largest m "
            "that fits")
    owner = f"{kit}'" if kit.endswith("s") else f"{kit}'s"
    return (f"in {owner} keys: m (the micro-batch) is {batch}{said}; r=0: no block re-run in backward ({kit} has no "
            "key for it; never searched)")
