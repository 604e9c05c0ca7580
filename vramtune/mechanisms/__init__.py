"""The memory mechanisms, one module or folder each; `vramtune.plugins` lists them (mechanisms/base.py: what one
declares)."""
