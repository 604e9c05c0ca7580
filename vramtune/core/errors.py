"""The errors that cross layers: a model that cannot be built from the spec (a user error, not a probe result). The
spec reader's own errors (Problem, SpecError) are core/reading.py's."""
from __future__ import annotations


class BuildError(Exception):
    """The spec's model cannot be built or does not accept the spec's data: a user error, not a probe result."""
