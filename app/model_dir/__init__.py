"""The model directory: what training writes and export, evaluation and pictures read.

    DIR/settings.json    the model, data and training configurations (`settings`)
    DIR/subwords.model   the subword vocabulary (written by the data pipeline)
    DIR/checkpoints/     the newest checkpoints;  DIR/best/  the best by BLEU (`checkpoints`)
    DIR/metrics.jsonl    progress and evaluations, one JSON object a line
    DIR/train/           TensorBoard logs (`event_files` trims them on resumption)

One training run at a time holds the directory (`lock`).
"""
