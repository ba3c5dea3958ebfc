"""What the commands share: flag groups and types, progress display, TensorFlow's quiet import."""
