"""The start of a planned run (a `RunPlan`): its model directory made and locked, its data
prepared with the run's vocabulary and its settings.json written, before `train()`.

    lock = lock_model_dir(plan, strategy)                  # held while this name holds it
    plan, data = prepare_model_dir(plan, strategy, created_model_dir)
    train(plan, data, strategy)

    data, summary = dry_run_data(plan, strategy)           # --dry-run: writes no model directory

Each raises what went wrong and prints nothing: the command (app/commands/train.py) says
it and chooses the exit code. The model directory it writes is described in `app.model_dir`.
"""

import dataclasses
import os
import shutil
import tempfile

from app.model_dir.lock import ModelDirLock
from app.model_dir.settings import check_resumable, save_settings
from app.training.init_from import settings_record
from app.training.strategy import is_chief
from data.dataset import prepare_data
from data.errors import DataError
from data.summary import summarize
from data.tokenizer import MODEL_FILENAME


def lock_model_dir(plan, strategy):
    """Makes the model directory and takes its lock (the chief's alone: only the chief
    writes there); returns the lock, None on another worker.

    Raises:
        OSError, ModelDirInUse: the directory cannot be made, or another run holds it (it
            is not removed: the run holding it may have made it).
        ValueError: it holds a run with other languages or another model, refused before
            the data is read and tokenized (minutes on WMT). The vocabulary size is
            compared once the tokenizer says what it holds (save_settings).
    """
    os.makedirs(plan.model_dir, exist_ok=True)
    lock = ModelDirLock(plan.model_dir) if is_chief(strategy) else None
    check_resumable(plan.model_dir, plan.model_config, plan.data_config, plan.train_config, ignore=("vocab_size",))
    return lock


def prepare_model_dir(plan, strategy, created_model_dir):
    """Prepares the data with the run's vocabulary and, on the chief, writes settings.json;
    returns `(plan, data)`: the plan with the tokenizer's real vocabulary size in its model
    (which can be smaller than asked), and the `data.dataset.PreparedData`.

    Multi-worker: another worker than the chief reads the vocabulary in the model
    directory once a complete earlier start left one (settings.json is written after it);
    otherwise it trains the same vocabulary (training is deterministic, and train() checks
    it) in a scratch directory rather than race the chief for the file.

    Raises:
        DataError, ValueError, OSError (a read-only or full disk): the model directory
            is removed if this start `created_model_dir` (a missing file, misaligned
            lines leave no empty one behind); one that already existed is left as it was.
    """
    model_dir, init, chief = plan.model_dir, plan.init, is_chief(strategy)
    first_start = not os.path.exists(os.path.join(model_dir, "settings.json"))
    vocab_dir = tempfile.mkdtemp(prefix="vocab-worker-") if not chief and first_start else model_dir
    try:
        if init and first_start:
            init.copy_vocabulary(vocab_dir)  # A first start: the new corpus is prepared with it.
        data = prepare_data(plan.data_config, vocab_dir, num_replicas=strategy.num_replicas_in_sync)
        model_config = dataclasses.replace(plan.model_config, vocab_size=data.tokenizer.vocab_size)
        if chief:
            save_settings(
                model_dir, model_config, plan.data_config, plan.train_config,
                replicas=strategy.num_replicas_in_sync,
                init_from=settings_record(model_dir, init) if init else None,
            )
    except (DataError, ValueError, OSError):
        if created_model_dir:
            shutil.rmtree(model_dir, ignore_errors=True)
        raise
    finally:
        if vocab_dir != model_dir:
            shutil.rmtree(vocab_dir, ignore_errors=True)  # The tokenizer holds it in memory.
    return dataclasses.replace(plan, model_config=model_config), data


def dry_run_data(plan, strategy):
    """The data of a --dry-run, prepared without writing a new model directory, and its
    summary (`data.summary.summarize`, made while the prepared files are there); returns
    `(data, summary)`.

    The vocabulary and shards go to a scratch directory, removed before this returns, the
    vocabulary copied from the cache of trained ones (data/vocabulary_cache.py) or trained
    once and cached, so the next dry run and the real run reuse it. A model directory that
    has a vocabulary is prepared in place.

    Raises:
        DataError: naming the bad input.
    """
    has_vocab = os.path.exists(os.path.join(plan.model_dir, MODEL_FILENAME))
    vocab_dir = plan.model_dir if has_vocab else tempfile.mkdtemp(prefix="dry-run-data-")
    try:
        if plan.init and not has_vocab:
            plan.init.copy_vocabulary(vocab_dir)
        data = prepare_data(plan.data_config, vocab_dir, num_replicas=strategy.num_replicas_in_sync)
        return data, summarize(data)
    finally:
        if not has_vocab:
            shutil.rmtree(vocab_dir, ignore_errors=True)  # The tokenizer holds it in memory.
