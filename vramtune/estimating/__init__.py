"""Estimates without the card: `vramtune estimate` (run.py: counted state, CPU probes of a depth-reduced copy,
stated factors; model.py: the arithmetic) and the memory estimation tool for Paddle's auto_tuner (autotuner_tool.py,
llama.py: standard library only)."""
