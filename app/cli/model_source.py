"""Which weights a command reads, from its flags: --saved-model PATH or --model-dir DIR,
with --checkpoint, --average-last and --ensemble for the latter, made into one
`ModelSource` (app/export/model_source.py) by `model_source_from_args`.

    add_model_source_arguments(parser)          # app.translate, app.score, app.evaluate
    add_weights_arguments(parser)               # export.py, app.pictures: --model-dir is their own
    add_ensemble_argument(parser)               # export.py: more runs decoded with --model-dir's
    source = model_source_from_args(args)       # raises FlagError, naming the flag

One conflict rule (`weights_flags_conflict`) and one message format for a path that is not
there (`FLAG PATH: no such directory`), for every command that loads a model.
"""

import argparse
import os

from app.cli.flag_types import FlagError, int_at_least
from app.export.locate import DEFAULT_EXPORT_BASE, ExportNotFound, saved_model_version
from app.export.model_source import ModelSource


def add_model_source_arguments(parser: argparse.ArgumentParser, required: bool = False):
    """--saved-model PATH or --model-dir DIR (one of them), and --checkpoint/--average-last
    for the latter. Not `required`: with neither, the command reads `DEFAULT_EXPORT_BASE`
    (app.translate, app.score); `required`: one must be given (app.evaluate)."""
    model = parser.add_mutually_exclusive_group(required=required)
    if required:
        model.add_argument("--model-dir", help="a training run's directory")
        model.add_argument(
            "--saved-model",
            help="an export: its base directory, as app.serve's --model_base_path (its newest version is "
            "scored), or one version directory in it",
        )
    else:
        model.add_argument(
            "--saved-model",
            metavar="PATH",
            help=f"an export: its base directory (its newest version) or one version (default {DEFAULT_EXPORT_BASE})",
        )
        model.add_argument(
            "--model-dir", metavar="DIR", help="a training run's directory (default: the export, --saved-model)"
        )
    add_weights_arguments(parser, applies_to="with --model-dir: ")
    add_ensemble_argument(parser, applies_to="with --model-dir: ")


def add_ensemble_argument(parser: argparse.ArgumentParser, applies_to: str = ""):
    """--ensemble DIR [DIR ...]: more training runs, decoded with --model-dir's as one
    ensemble (app/export/ensemble.py). `applies_to` prefixes the help."""
    parser.add_argument(
        "--ensemble",
        nargs="+",
        metavar="DIR",
        help=f"{applies_to}more training runs decoded with --model-dir's as one ensemble, by the mean of their "
        "distributions; they must share its subword model and lowercasing, and the smallest max_length holds. "
        "--checkpoint and --average-last apply to every member; without them each takes its own settings.json's "
        "choice (default: none, --model-dir's model alone)",
    )


def add_weights_arguments(parser: argparse.ArgumentParser, applies_to: str = ""):
    """--checkpoint and --average-last: which of a training run's weights to load.

    With neither, `app.export.saved_model.load_trained` takes the run's own choice, written
    in its settings.json. `applies_to` prefixes the help, e.g. "with --model-dir: ".
    """
    parser.add_argument(
        "--checkpoint",
        help=f"{applies_to}'best' (by validation BLEU), 'latest', a checkpoint path, or the "
        "name of a kept one such as ckpt-16000 (default: as the run's settings.json says)",
    )
    parser.add_argument(
        "--average-last",
        type=int_at_least(0),
        metavar="K",
        help=f"{applies_to}average the newest K kept checkpoints; 0: do not "
        "(default: as the run's settings.json says)",
    )


def weights_flags_conflict(args):
    """The rule of the weights' flags, as a message, or None: --checkpoint and --average-last
    choose among a model directory's weights, and --ensemble adds model directories to
    it, so they need --model-dir."""
    if getattr(args, "model_dir", None) is None:
        for flag, value in (("--checkpoint", args.checkpoint), ("--average-last", args.average_last)):
            if value is not None:
                return f"{flag} applies to --model-dir only; a SavedModel holds the weights it was exported with"
        if getattr(args, "ensemble", None):
            return (
                "--ensemble applies to --model-dir only; a SavedModel holds the model (or ensemble) it was "
                "exported with"
            )
    return None


def missing_directory(flag, path):
    """The one message for a flag's directory that is not there, or None where it is."""
    if os.path.isdir(path):
        return None
    if os.path.exists(path):
        return f"{flag} {path}: is a file, not a directory"
    return f"{flag} {path}: no such directory"


def model_source_from_args(args):
    """The `ModelSource` of parsed flags: --model-dir's run with --checkpoint,
    --average-last and the --ensemble runs, else the newest SavedModel version under
    --saved-model (a command without --saved-model reads `DEFAULT_EXPORT_BASE` where
    --model-dir is not given). Reads the disk; no TensorFlow.

    Raises:
        FlagError: naming the flag: a weights flag or --ensemble without --model-dir, no
            such model directory, no export where --saved-model says.
    """
    problem = weights_flags_conflict(args)
    if problem:
        raise FlagError(problem)
    model_dir = getattr(args, "model_dir", None)
    if model_dir is not None:
        ensemble = tuple(getattr(args, "ensemble", None) or ())
        for flag, path in (("--model-dir", model_dir), *(("--ensemble", member) for member in ensemble)):
            problem = missing_directory(flag, path)
            if problem:
                raise FlagError(problem)
        return ModelSource(
            model_dir=model_dir, checkpoint=args.checkpoint, average_last=args.average_last, ensemble=ensemble
        )
    try:
        return ModelSource(saved_model=saved_model_version(getattr(args, "saved_model", None) or DEFAULT_EXPORT_BASE))
    except ExportNotFound as error:
        raise FlagError(f"--saved-model: {error}") from None
