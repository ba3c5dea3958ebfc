"""What the commands share, and only they: flag groups (`flags`), which weights a command
reads (`model_source`), argparse's types and the one `FlagError` (`flag_types`), and the
`--output` file written whole (`output_file`). The library never imports this package
(tests/test_layout.py): its defaults live with their owners."""
