"""vramtune: find the cheapest PaddlePaddle training configuration that fits your memory budget."""
__version__ = "0.1.0"
