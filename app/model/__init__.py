"""The model: its configuration (`config`) and its assembly from `layers/` (`transformer`)."""
