"""Use case: the answer verified by the user's own tool before it is written (answer.py)."""
