"""The Transformer translation application around the custom layers in `layers/`.

Commands (`python -m app.NAME`): evaluate, serve, client, pictures; training and export
are `train.py` and `export.py` at the root. The packages, by role (docs/layout.md):

    app/model/       the model's configuration and its assembly from `layers/`
    app/decoding/    beam search, greedy decoding, raw ids -> translated ids
    app/training/    recipes, the step, the loop and the objects it orchestrates
    app/model_dir/   what training writes and export reads: settings, checkpoints, lock
    app/export/      the SavedModel for TensorFlow Serving
    app/serving/     the local TF Serving stand-in's parts and its page
    app/cli/         flags shared by the commands, progress, TensorFlow's quiet import
"""
