"""Several training runs loaded as one ensemble, for export, translation and evaluation.

    trained = load_ensemble(["runs/a", "runs/b"])        # refused unless they can decode as one
    translator = trained.translator(decoding)            # every signature decodes the ensemble
    info = {**export_metadata(...), **ensemble_metadata(["runs/a", "runs/b"], trained)}

An ensemble averages the members' distributions over one vocabulary
(app/decoding/ensemble.py), and one tokenizer turns its strings into ids and back, so
the members must share the subword model (the bytes of its file, not only its size: two
vocabularies of 8,000 pieces trained apart give one id two meanings), the lowercasing of
their text (a lowercased model cannot read what a cased one is fed) and the vocabulary
size of their output layer. Each is checked from the runs' settings.json and vocabulary
files, before any weights load, and refused with the two directories and the difference
named. Members may differ in anything else: size, positions (the smallest `max_length`
holds), normalization, training data.

Each member's weights are chosen alike: `checkpoint` or `average_last` apply to every
member, and with neither each member takes its own run's choice (`load_trained`).
"""

import os

from app.export.export_info import ENSEMBLE
from app.export.saved_model import ExportError, load_trained
from app.model_dir.settings import load_settings
from data.tokenizer import MODEL_FILENAME


def load_ensemble(model_dirs, checkpoint=None, average_last=None):
    """The `TrainedModel` of the first run, with the others as its `ensemble`; one run's
    own `TrainedModel` where `model_dirs` names one.

    Args:
        model_dirs: the runs' directories, the first the one whose tokenizer is used (they
            share it) and whose data export's alpha search reads.
        checkpoint: for every member: "best", "latest", or the name of a checkpoint each
            keeps ("ckpt-16000"); a path names one run's file and is refused.
        average_last: for every member, as `load_trained` takes it.

    Raises:
        ExportError: members that cannot decode as one (`check_members`), a checkpoint
            path, or a member's own weights error.
    """
    model_dirs = list(model_dirs)
    if not model_dirs:
        raise ValueError("an ensemble needs at least one model directory")
    if len(model_dirs) == 1:
        return load_trained(model_dirs[0], checkpoint, average_last)
    if checkpoint is not None and os.path.basename(checkpoint) != checkpoint:
        raise ExportError(
            f"--checkpoint {checkpoint} names one run's file; for an ensemble give 'best', 'latest' or the "
            "name of a checkpoint every member keeps (ckpt-16000)"
        )
    check_members(model_dirs)
    first, *others = (load_trained(model_dir, checkpoint, average_last) for model_dir in model_dirs)
    return first._replace(ensemble=tuple(others))


def check_members(model_dirs):
    """Raises ExportError unless every run of `model_dirs` can decode with the first as one
    ensemble: the same subword model file, lowercasing and vocabulary size. The message
    names both directories and every difference. Reads settings.json and the vocabulary
    files only."""
    first, *others = model_dirs
    reference = _member(first)
    for other in others:
        differences = _differences(first, reference, other, _member(other))
        if differences:
            raise ExportError(f"{first} and {other} cannot decode as one ensemble: " + "; ".join(differences))


def _member(model_dir):
    """`(subword model bytes, lowercase, vocab_size)` of a run."""
    model_config, data_config, _ = load_settings(model_dir)
    vocabulary = os.path.join(model_dir, MODEL_FILENAME)
    if not os.path.exists(vocabulary):
        raise ExportError(f"{model_dir} has no vocabulary file {MODEL_FILENAME}")
    with open(vocabulary, "rb") as f:
        return f.read(), data_config.lowercase, model_config.vocab_size


def _differences(first, reference, other, member):
    """What keeps the run `other` (`member`, `_member`'s) from decoding with `first`'s, in words."""
    (first_bytes, first_lowercase, first_size), (other_bytes, other_lowercase, other_size) = reference, member
    differences = []
    if first_bytes != other_bytes:
        differences.append(
            f"their subword models differ ({os.path.join(first, MODEL_FILENAME)} and "
            f"{os.path.join(other, MODEL_FILENAME)} are not the same file), and an ensemble reads and writes one"
        )
    if first_lowercase != other_lowercase:
        differences.append(
            f"lowercase is {first_lowercase} in {first} and {other_lowercase} in {other} (train.py --lowercase): "
            "the members must read the same text"
        )
    if first_size != other_size:
        differences.append(
            f"their vocabularies have {first_size} and {other_size} tokens: an ensemble averages distributions "
            "over one"
        )
    return differences


def ensemble_metadata(model_dirs, trained):
    """What export_info.json records of an ensemble's members, in order: `{"ensemble":
    [absolute model directories], "ensemble_weights": [which weights of each]}`; {} for one
    run. `export_info.ENSEMBLE` names the first, which a CTranslate2 version refuses."""
    if not trained.ensemble:
        return {}
    members = (trained, *trained.ensemble)
    return {
        ENSEMBLE: [os.path.abspath(model_dir) for model_dir in model_dirs],
        "ensemble_weights": [member.weights for member in members],
    }


def describe(model_dirs, trained):
    """Which weights `trained` holds, in words: its own description for one run, else
    "an ensemble of DIR (weights), DIR (weights)"."""
    if not trained.ensemble:
        return trained.weights
    members = (trained, *trained.ensemble)
    return "an ensemble of " + ", ".join(
        f"{model_dir} ({member.weights})" for model_dir, member in zip(model_dirs, members, strict=True)
    )
