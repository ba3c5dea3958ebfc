"""settings.json: the model, data and training configurations a run was started with.

Training writes it (`save_settings`) at every start; export, evaluation and the pictures
read it (`load_settings`) to rebuild the model and its data settings. A file written while
label smoothing was a model setting reads with it among the training settings. A run resumes only
with the model and data it began with (`check_resumable`). A run fine-tuned from another
(`train.py --init-from`) also records where its first weights came from (`load_init_from`).
"""

import dataclasses
import json
import os

from data.atomic_files import write_atomically


def check_resumable(model_dir, model_config, data_config, train_config, ignore=()):
    """Raises ValueError unless `model_dir` is new or holds a run these settings resume.

    A run must resume with the model and data it began with; of the training settings,
    only a change into or out of mixed_float16 is refused, as its checkpoints hold a loss
    scale that the others' lack. Model fields in `ignore` are not compared (the vocabulary
    size asked for, before the tokenizer says what it holds).

    Returns:
        The training settings dict the run was last started with; None for a new directory.
    """
    if not os.path.exists(os.path.join(model_dir, "settings.json")):
        return None
    # Read through the config classes, so a field added since the run began (say
    # data.bpe_dropout) compares as its default rather than as missing.
    previous_model, previous_data, previous_train = load_settings(model_dir)
    sections = {
        "model": (previous_model.to_dict(), model_config.to_dict()),
        "data": (dataclasses.asdict(previous_data), dataclasses.asdict(data_config)),
    }
    for section, (previous, now) in sections.items():
        changed = {
            k: (previous.get(k), v) for k, v in now.items() if previous.get(k) != v and k not in ignore
        }
        if changed:
            details = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in sorted(changed.items()))
            raise ValueError(
                f"{model_dir} holds a run with another {section} configuration ({details}); "
                "use another --model-dir"
            )
    was, now = previous_train.get("precision"), train_config.precision
    if was is not None and was != now and "mixed_float16" in (was, now):
        raise ValueError(
            f"{model_dir} holds a run trained in {was}, which cannot resume in {now}: mixed_float16's "
            f"checkpoints hold a loss scale that the others' lack; give --precision {was} "
            "or use another --model-dir"
        )
    return previous_train


def save_settings(model_dir, model_config, data_config, train_config, log=print, replicas=None, init_from=None):
    """Writes settings.json atomically; refuses to resume a run with another model or data.

    Training settings may change between starts (a longer run, another time budget):
    each change is logged; `check_resumable` says which may not. `replicas`, the
    strategy's replica count, is kept with the training settings: the batches are cut
    for it. `init_from`, a dict, is written as the "init_from" section (a fine-tuned run's
    origin: `app.training.init_from.InitRun.record`); without it, the section the file
    already holds is kept.
    """
    path = os.path.join(model_dir, "settings.json")
    settings = {
        "model": model_config.to_dict(),
        "data": dataclasses.asdict(data_config),
        "train": {**dataclasses.asdict(train_config), **({"replicas": replicas} if replicas else {})},
    }
    previous_train = check_resumable(model_dir, model_config, data_config, train_config)
    init_from = init_from or (load_init_from(model_dir) if previous_train is not None else None)
    if init_from:
        settings["init_from"] = init_from
    if previous_train is not None:
        changed = {
            k: (previous_train[k], v)
            for k, v in settings["train"].items()
            if k in previous_train and previous_train[k] != v
        }
        if changed:
            details = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in sorted(changed.items()))
            log(f"resuming with changed training settings: {details}")
        if "replicas" in changed:
            log(
                "the step count and --batch-tokens carry on, but a batch's rows are a multiple of the replicas: "
                "the rest of the current epoch is cut into other batches than its first part (some of its pairs "
                "are trained on twice, others not at all)"
            )
    write_atomically(path, json.dumps(settings, indent=2))


def load_settings(model_dir):
    """`(model_config, data_config, train_settings dict)` of a model directory."""
    from app.model.config import ModelConfig
    from data.config import DataConfig

    path = os.path.join(model_dir, "settings.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{model_dir} is not a model directory: no settings.json in it")
    settings = _read_settings(path)
    try:
        return ModelConfig.from_dict(settings["model"]), DataConfig(**settings["data"]), settings["train"]
    except TypeError as error:  # A field this version does not know, or one missing.
        raise ValueError(f"{path} does not match this version's configuration: {error}") from error


def load_init_from(model_dir):
    """The "init_from" section of a model directory's settings.json: where a run
    fine-tuned with `train.py --init-from` took its first weights from (the init run's
    `model_dir`, the `weights` and their `checkpoints`); None for a run trained from scratch."""
    path = os.path.join(model_dir, "settings.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{model_dir} is not a model directory: no settings.json in it")
    return _read_settings(path).get("init_from")


def _read_settings(path):
    """The parsed settings.json at `path`, with its three sections.

    Raises:
        ValueError: naming `path`, if it is not JSON or lacks a section.
    """
    try:
        with open(path) as f:
            settings = json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); restore it or use a new --model-dir") from error
    missing = [
        section for section in ("model", "data", "train") if not isinstance(settings, dict) or section not in settings
    ]
    if missing:
        raise ValueError(f"{path} lacks the section(s) {', '.join(missing)}; restore it or use a new --model-dir")
    return _moved_to_training(settings)


def _moved_to_training(settings):
    """`settings` with the model fields that are training settings now (label smoothing,
    `app.model.config.FORMER_FIELDS`) moved to the "train" section, as a run written
    before the move would have them now: its value trains on, and the model is built
    without it."""
    from app.model.config import FORMER_FIELDS

    if not (isinstance(settings["model"], dict) and isinstance(settings["train"], dict)):
        return settings  # load_settings names the file
    model, train = dict(settings["model"]), dict(settings["train"])
    for field in FORMER_FIELDS:
        if field in model:
            train.setdefault(field, model.pop(field))
    return {**settings, "model": model, "train": train}
