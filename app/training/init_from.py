"""Fine-tuning: `python train.py --init-from MODEL_DIR` starts a new run from a trained one.

    python train.py --init-from runs/tiny-multi30k-en-de --dataset files:a.en,a.de,b.en,b.de \
        --model-dir runs/tiny-finetuned --train-steps 2000

The new run takes from the init run:
  - its weights, chosen as export.py chooses them (the average of its newest K
    checkpoints or its best, as its settings.json says), or `--init-checkpoint`;
  - its model configuration, every field of it, and its vocabulary: the subword model
    is copied byte for byte into the new model directory and prepares the new corpus;
  - its label smoothing, where not given (--label-smoothing, or a --variant of row D);
  - where not given: the languages, --max-length, and the size whose recipe sets the
    training defaults (the size nearest its model, `nearest_size`).
It has its own schedule (step 0, a fresh optimizer, the usual warmup) and its own model
directory, whose settings.json records where it came from (`InitRun.record`). Running
the same command again resumes the new run from its own newest checkpoint: the init
weights are loaded only while it has none.

Everything is checked before the corpus is read: a flag that contradicts the init run's
model or vocabulary is refused, naming the flag and both values (the flags are read in
app/commands/train_plan.py, `flags_from_init`; this module holds the run, not its flags).
"""

import dataclasses
import math
import os
import re
from typing import Optional, Tuple

import tensorflow as tf

from app.model.config import SIZES, ModelConfig
from app.model_dir import checkpoints
from app.model_dir.settings import load_init_from, load_settings
from data.atomic_files import write_atomically
from data.config import DataConfig
from data.tokenizer import MODEL_FILENAME


class InitFromError(ValueError):
    """A --init-from run that cannot start the new one, or a flag that contradicts it."""


@dataclasses.dataclass(frozen=True)
class InitRun:
    """The trained run a fine-tuning run starts from, and the weights it starts with."""

    # The init run's model directory, as given.
    model_dir: str
    model_config: ModelConfig
    data_config: DataConfig
    # The kept checkpoints whose weights, averaged if more than one, start the new run.
    checkpoints: Tuple[str, ...]
    # The init run's learning rate at its newest chosen checkpoint, times sqrt(d_model): its
    # schedule's scale * min(step^-0.5, step * warmup^-1.5) (app/training/schedule.py).
    final_rate_factor: float = 0.0
    # The init run's label smoothing, which the new run keeps unless told otherwise (None:
    # its settings.json has none).
    label_smoothing: Optional[float] = None

    def learning_rate_scale(self, warmup_steps):
        """The schedule scale whose peak, after `warmup_steps`, is the rate the init run
        had reached: fine-tuning goes on at the rate its weights were trained at, not the
        from-scratch peak, which throws a trained model far off (docs/training.md,
        "Fine-tuning")."""
        return self.final_rate_factor * math.sqrt(warmup_steps)

    @property
    def weights(self):
        """The weights, as export.py names them: a checkpoint path or "average of ckpt-3, ckpt-4"."""
        if len(self.checkpoints) == 1:
            return self.checkpoints[0]
        return f"average of {', '.join(os.path.basename(path) for path in self.checkpoints)}"

    def record(self):
        """What the new run's settings.json records under "init_from"."""
        return {
            "model_dir": os.path.abspath(self.model_dir),
            "weights": self.weights,
            "checkpoints": [os.path.abspath(path) for path in self.checkpoints],
        }

    def initialize(self, model):
        """Sets `model`'s weights (a model built from `model_config`) to the init weights;
        returns the line that says so."""
        if len(self.checkpoints) == 1:
            checkpoints.restore_weights(model, self.checkpoints[0])
        else:
            checkpoints.average_checkpoints(model, list(self.checkpoints))
        return f"initialized from {self.model_dir}: {self.weights}"

    def copy_vocabulary(self, directory):
        """Writes the init run's subword model into `directory`, byte for byte."""
        with open(os.path.join(self.model_dir, MODEL_FILENAME), "rb") as f:
            write_atomically(os.path.join(directory, MODEL_FILENAME), f.read())


def read_init_run(model_dir, checkpoint=None):
    """The `InitRun` of `--init-from model_dir`, its weights chosen by `checkpoint`.

    Args:
        checkpoint: `--init-checkpoint`: "best", "latest", a checkpoint path or the name of
            one the run keeps; None: as export.py chooses with neither --checkpoint nor
            --average-last.

    Raises:
        InitFromError: `model_dir` is missing or not a trained run (no settings.json, no
            vocabulary, no checkpoint), or `checkpoint` names none of its checkpoints.
    """
    flag = f"--init-from {model_dir}"
    if not os.path.isdir(model_dir):
        raise InitFromError(f"{flag}: no such directory")
    try:
        model_config, data_config, train_settings = load_settings(model_dir)
    except (FileNotFoundError, ValueError) as error:
        raise InitFromError(f"{flag} is not a trained run: {error}") from None
    if not os.path.exists(os.path.join(model_dir, MODEL_FILENAME)):
        raise InitFromError(f"{flag} is not a trained run: it has no vocabulary file {MODEL_FILENAME}")
    chosen = chosen_checkpoints(model_dir, train_settings, checkpoint)
    return InitRun(
        model_dir, model_config, data_config, tuple(chosen), _final_rate_factor(train_settings, chosen),
        train_settings.get("label_smoothing"),
    )


def _final_rate_factor(train_settings, chosen):
    """`InitRun.final_rate_factor`: the init run's schedule at its newest chosen checkpoint's
    step (its number: ckpt-N is step N), before any cooldown."""
    from app.training.schedule import resolve_warmup_steps

    steps = [int(match.group(1)) for match in (re.search(r"ckpt-(\d+)$", path) for path in chosen) if match]
    step = max(max(steps, default=1), 1)
    warmup = resolve_warmup_steps(train_settings.get("warmup_steps"), train_settings.get("train_steps"))
    scale = train_settings.get("learning_rate_scale") or 1.0
    return scale * min(step**-0.5, step * warmup**-1.5)


def chosen_checkpoints(model_dir, train_settings, checkpoint=None):
    """The checkpoints of `model_dir` whose weights export.py would take (averaged if
    several): `app.export.saved_model.load_translator`'s choice, without --average-last.

    With `checkpoint` None, the run's own choice: the newest `average_last` kept
    checkpoints (as many as were kept if fewer), or the best where it names none; "best"
    is the newest where no best was kept.
    """
    kept = checkpoints.checkpoint_paths(model_dir)
    if checkpoint is None:
        average_last = min(train_settings.get("average_last") or 0, len(kept))
        if average_last:
            return kept[-average_last:]
    if checkpoint in (None, "best"):
        path = checkpoints.best_checkpoint(model_dir) or (kept[-1] if kept else None)
    elif checkpoint == "latest":
        path = kept[-1] if kept else None
    elif tf.io.gfile.exists(checkpoint + ".index"):
        path = checkpoint
    else:
        by_name = {os.path.basename(path): path for path in kept}
        if checkpoint not in by_name:
            raise InitFromError(
                f"--init-checkpoint {checkpoint!r} is no checkpoint of --init-from {model_dir}: give 'best', "
                f"'latest', a checkpoint path (without .index) or the name of one it keeps "
                f"({', '.join(by_name) or 'none'})"
            )
        path = by_name[checkpoint]
    if not path:
        raise InitFromError(f"--init-from {model_dir} is not a trained run: it has no checkpoint yet")
    return [path]


def nearest_size(model_config):
    """The named size whose model differs from `model_config` in the fewest fields (the
    first such in SIZES): the size whose recipe a fine-tuned run trains with by default."""

    def differences(size):
        sized = ModelConfig.from_size(size, vocab_size=model_config.vocab_size).to_dict()
        return sum(value != sized[field] for field, value in model_config.to_dict().items())

    return min(SIZES, key=differences)


def check_new_model_dir(model_dir, init):
    """Raises InitFromError if `model_dir` cannot hold a run fine-tuned from `init`: it
    is the init run's own directory, or it holds another run (one trained from scratch, or
    fine-tuned from another directory). One that holds a run fine-tuned from `init` is
    resumed; `app.model_dir.settings.check_resumable` compares the rest of its settings.

    With `init` None (a run without --init-from), refuses a directory that holds a
    fine-tuned run, saying how to resume it.
    """
    has_run = os.path.exists(os.path.join(model_dir, "settings.json"))
    record = load_init_from(model_dir) if has_run else None
    if init is None:
        if record:
            raise InitFromError(
                f"--model-dir {model_dir} holds a run fine-tuned from {record['model_dir']}: give "
                f"--init-from {record['model_dir']} to resume it, or use another --model-dir"
            )
        return
    if os.path.exists(model_dir) and os.path.samefile(model_dir, init.model_dir):
        raise InitFromError(
            f"--model-dir {model_dir} is --init-from {init.model_dir} itself: a fine-tuned run needs a model "
            "directory of its own; give another --model-dir"
        )
    if not has_run:
        return
    source = os.path.abspath(init.model_dir)
    if record is None or os.path.realpath(record.get("model_dir", "")) != os.path.realpath(source):
        held = f"fine-tuned from {record.get('model_dir')}" if record else "trained from scratch"
        raise InitFromError(
            f"--model-dir {model_dir} holds another run ({held}), not one fine-tuned from --init-from {source}; "
            "use another --model-dir"
        )


def settings_record(model_dir, init):
    """The "init_from" record the run in `model_dir` writes: that of its first start once it
    has a checkpoint (its weights came from there), else `init`'s."""
    if tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")):
        return load_init_from(model_dir) or init.record()
    return init.record()

