"""Training curves: a run's `metrics.jsonl` read, and its losses, validation BLEU and
learning rate drawn against the optimizer step, one panel per quantity.

matplotlib is imported only inside `plot_curves`.
"""

import json
import os

import numpy as np

from app.visualization.output import PicturesError, prepare_output

# The curves, by metrics.jsonl key (see app/training/metrics_log.py): (panel, legend label). Panels
# appear in this order. Both losses are label-smoothed, so they compare.
CURVES = {
    "loss": ("loss per target token (label-smoothed cross-entropy)", "training"),
    "valid_loss": ("loss per target token (label-smoothed cross-entropy)", "validation"),
    "bleu": ("validation BLEU (greedy decoding, sacreBLEU)", None),
    "learning_rate": ("learning rate", None),
}
# Recorded at evaluations only, a few points: each gets a marker.
EVALUATION_KEYS = ("valid_loss", "bleu")


def read_metrics(path):
    """The records of a `metrics.jsonl` written by `app.training.metrics_log`, in file order.

    A last line without its newline is skipped if it does not parse: training is
    writing it right now (the file is read while a run goes on).

    Raises:
        PicturesError: naming the file, if it is missing, empty or not JSON lines of
            objects that each have a "step".
    """
    if not os.path.isfile(path):
        raise PicturesError(f"{path} not found: no metrics yet (training writes it every --log-every steps)")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records = []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PicturesError(f"{path} line {number} is not UTF-8 ({error.reason} at byte {error.start})") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # the unfinished last line
                continue
            raise PicturesError(f"{path} line {number} is not JSON ({error.msg}): {line[:80]!r}") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise PicturesError(f"{path} line {number} is not a record with an integer \"step\": {line[:80]!r}")
        records.append(record)
    if not records:
        raise PicturesError(f"{path} is empty: no metrics recorded yet")
    return records


def curve_series(records):
    """`{key: (steps, values)}` for every key of `CURVES` that the records hold.

    Steps are sorted and each appears once, with its last recorded value: a run that
    resumes from a checkpoint repeats the steps it had logged after that checkpoint, and
    the later records are the ones its weights descend from.
    """
    series = {}
    for key in CURVES:
        by_step = {}
        for record in records:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                by_step[record["step"]] = float(value)
        if by_step:
            steps = sorted(by_step)
            series[key] = (np.array(steps), np.array([by_step[s] for s in steps]))
    return series


def plot_curves(records, path, title=""):
    """Draws one panel per quantity of `CURVES` that `records` hold, against the step.

    Raises:
        PicturesError: if the records hold none of them.
    """
    from matplotlib.figure import Figure

    series = curve_series(records)
    if not series:
        raise PicturesError(f"no curves to draw: the records have none of {', '.join(CURVES)}")
    panels = list(dict.fromkeys(CURVES[key][0] for key in series))
    figure = Figure(figsize=(7.0, 2.4 * len(panels) + 0.6), layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    for key, (steps, values) in series.items():
        panel, label = CURVES[key]
        ax = axes[panels.index(panel)]
        marker = "o" if key in EVALUATION_KEYS else None
        ax.plot(steps, values, marker=marker, markersize=3, label=label)
        ax.set_title(panel, loc="left", fontsize=9)
        ax.grid(True, alpha=0.3)
        if label:
            ax.legend(fontsize=8)
    axes[-1].set_xlabel("step")
    figure.suptitle(title, fontsize=10)
    prepare_output(path, "file")
    # format given: a name without ".png" is written as named, not with ".png" appended.
    figure.savefig(path, dpi=120, format="png")
    return path
