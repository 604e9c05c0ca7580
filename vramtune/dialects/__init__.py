"""The files users train with, each in its own dialect (one folder per dialect), read as vramtune specs."""
