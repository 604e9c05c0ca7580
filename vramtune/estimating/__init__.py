"""Estimates without the card: `vramtune estimate SPEC` (spec_estimate.py: counted state, CPU probes of a
depth-reduced copy in prober.py, the points of their fit in activation_points.py, the rows and notes in spec_rows.py,
stated or calibrated factors in factors.py; memory/state.py: the arithmetic), `vramtune estimate MODEL_FOLDER`
(asking.py the question, answer.py the answer), what both estimates' rows share (rows.py: the recompute levels, the
predicted best), and the memory estimation tool for Paddle's auto_tuner (autotuner_tool.py, llama.py: standard library
only)."""
