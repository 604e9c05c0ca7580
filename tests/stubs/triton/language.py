"""`triton.language` of the import-only stand-in (tests/stubs/triton/__init__.py)."""
from triton import _Stand


def __getattr__(name: str) -> _Stand:
    return _Stand()
