"""What the commands share: flag groups (`flags`) and argparse types (`flag_types`), progress
display, TensorFlow's quiet import and CPU thread pools, the threads decoding gets, a warning
for a GPU TensorFlow cannot see, and the `--output` file written whole."""
