"""The Transformer translation application around the custom layers in `layers/`.

The commands live in `app/commands/`, one module each. `python -m app.NAME` runs eight of
them through the aliases `app/NAME.py`: translate, score, evaluate, serve, client,
pictures, prepare and preflight; train and export run as `train.py` and `export.py` at
the root. The packages, top floor first (docs/layout.md: imports only look down):

    app/commands/    the commands: flags -> configurations -> one call into the library
    app/training/    recipes, the step, the loop and the objects it orchestrates
    app/export/      the SavedModel for TensorFlow Serving, the alpha chosen on validation
    app/serving/     the local TF Serving stand-in's parts and its page
    app/cli/         flags and argparse types shared by the commands, progress, TensorFlow's quiet import
    app/decoding/    one search loop with its strategies (beam, greedy, sampling), the incremental decoder
    app/model_dir/   what training writes and export reads: settings, checkpoints, lock
    app/evaluation/  BLEU and chrF of translations, decoding in length-sorted batches, significance
    app/model/       the model's configuration and its assembly from `layers/`
"""
