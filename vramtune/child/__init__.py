"""The child side: everything that imports Paddle (devices, counters, model building, training, the worker).

Only probe children import this package; the parent never imports Paddle or touches CUDA.
"""
# Before Paddle: Paddle 2.6's libpaddle exports its own zlib, and Python's zlib module loaded after it breaks
# (`import paddlenlp` then dies in scipy with "zlib.error: Error -2" or a segfault). Every child entry point
# (the worker, the fork server, the count) imports this package first.
import zlib  # noqa: F401
