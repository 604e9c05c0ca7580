"""`vramtune doctor`: checks, on the user's device, every assumption vramtune's measurements rest on (the counters,
the budget's enforcement, the allocator's reserve; what the mechanisms assume of Paddle: AMP, recompute and ranks;
`checks.py` lists them). Each check measures in child processes of its own and is judged in the parent; the result is
saved per device and Paddle version, gates the first GPU probe (GATING) and calibrates `estimate`."""
