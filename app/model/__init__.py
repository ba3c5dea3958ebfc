"""The model: its configuration (`config`), its assembly from `layers/` (`transformer`) and
the FLOPs of a step (`flops`)."""
