"""The model sources, one module each; `vramtune.plugins` lists them (sources/base.py: what one declares)."""
