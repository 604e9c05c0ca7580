"""The child side: everything that imports Paddle (devices, counters, model building, training, the worker).

Only probe children import this package; the parent never imports Paddle or touches CUDA.
"""
