"""Training: the size recipes, the distributed step, the loop and the pieces it orchestrates;
the `RunPlan` a run is made from and its start (`run_plan`, `start`), and the rehearsal of a
run (`rehearsal`). No flags: app/commands/train_plan.py makes a `RunPlan` of them.

Importing this package imports nothing: `fused_adam`'s parameter names are read by
TensorFlow-free tools (benchmarks/gpu) too.
"""
