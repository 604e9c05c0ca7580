"""A factory module that fails at import, like a user's module with a bug."""
raise ImportError("No module named 'flash_attn'")
