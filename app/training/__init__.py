"""Training: the size recipes, the distributed step, the loop and the pieces it orchestrates.

Importing this package imports nothing: `fused_adam`'s parameter names are read by
TensorFlow-free tools (benchmarks/gpu) too.
"""
