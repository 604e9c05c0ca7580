"""The suite's own layout: its folders are not packages, so two test modules with one file name stop the whole
suite's collection ("import file mismatch") for everyone."""
from __future__ import annotations

from collections import Counter

from conftest import ROOT


def test_no_two_test_modules_share_a_file_name():
    names = Counter(path.name for path in (ROOT / "tests").rglob("test_*.py"))
    assert sorted(name for name, count in names.items() if count > 1) == []
