"""vramtune: find the fastest PaddlePaddle training configuration that fits your memory budget."""
__version__ = "0.3.0"
