"""What every kit's source does alike, Paddle-free: the child builds under the checkout, and a requirement missing
there is one message naming the kit's requirements.txt."""
from __future__ import annotations

import sys

import pytest

from vramtune.core.errors import BuildError
from vramtune.dialects.kits.source import kit_code


def test_a_kit_that_cannot_be_imported_is_one_message_and_its_checkout_leaves_the_path(tmp_path):
    with pytest.raises(BuildError) as raised, kit_code("PaddleClas", str(tmp_path)):
        assert sys.path[0] == str(tmp_path)
        import ppcls_not_installed  # noqa: F401
    assert str(raised.value) == (f"PaddleClas in {tmp_path} cannot be imported: No module named 'ppcls_not_installed' "
                                 f"(install the kit's requirements: pip install -r {tmp_path}/requirements.txt; "
                                 "missing: ppcls_not_installed)")
    assert str(tmp_path) not in sys.path
