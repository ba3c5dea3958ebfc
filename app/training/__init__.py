"""Training: the size recipes, the distributed step, the loop and the pieces it orchestrates;
train.py's flags and run (`command`, `run_plan`) and the rehearsal of a run (`preflight`).

Importing this package imports nothing: `fused_adam`'s parameter names are read by
TensorFlow-free tools (benchmarks/gpu) too.
"""
