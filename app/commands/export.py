"""Exports a trained model as a versioned SavedModel for TensorFlow Serving: `python export.py`
at the root, or `transformer-export` once installed.

    python export.py --model-dir runs/tiny-multi30k-en-de        # saved_models/translator/<next>/
    python export.py --model-dir DIR --checkpoint best           # the best by validation BLEU
    python export.py --model-dir DIR --average-last 5            # average the newest 5 checkpoints
    python export.py --model-dir runs/a --ensemble runs/b runs/c # one SavedModel, the three as an ensemble
    python export.py --model-dir DIR --model-name en-de --version 3   # saved_models/en-de/3/
    python export.py --model-dir DIR --model-base-path /srv/models/translator   # /srv/models/translator/<next>/
    python export.py --model-dir DIR --alpha 0.6                 # this alpha: no search on validation
    python export.py --model-dir DIR --format ctranslate2        # saved_models/translator/ctranslate2/<next>/
    python export.py --model-dir DIR --alignment-head=-1:0       # align reads the last layer's head 0
    python export.py --model-dir DIR --format ctranslate2 --alignment-head=-1:0   # CTranslate2's attention: the same
    python export.py --model-dir DIR --warmup-signatures serving_default,align   # warm up these two only

With neither --checkpoint nor --average-last, the run's settings.json says which weights:
tiny averages its newest 10 checkpoints, base and big their newest 5 and 20, as the paper
did; small takes the best by validation BLEU (`train.py --average-last`).

Without --alpha, the length penalty of the default signature is chosen on the validation
split, as the paper chose its 0.6 on the development set: of 0.0, 0.2, ..., 1.6, the
smallest whose BLEU is not significantly below the best alpha's (paired bootstrap, 95%
confidence; app/export/alpha_search.py). export.py prints each alpha's BLEU, p-value
against the best and decoding speed, and export_info.json records them with the choice.

See app/export/saved_model.py for the signatures and guarantees.
"""

import argparse
import dataclasses
import os
import sys
import time
from typing import Optional

# None of these imports TensorFlow: --help and a bad value answer at once.
from app.cli.flag_types import FlagError, add_hidden_alias, model_name, positive_int
from app.cli.flags import add_decoding_arguments, alignment_head
from app.cli.model_source import add_ensemble_argument, add_weights_arguments, model_source_from_args
from app.export.locate import DEFAULT_MODEL_NAME, export_base
from app.decoding.config import AlignmentHead, DecodingConfig
from app.export.model_source import ModelSource


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model-dir",
        default=os.path.join("runs", "tiny-multi30k-en-de"),
        help="the training run (default runs/tiny-multi30k-en-de, the default run's)",
    )
    name = parser.add_argument(
        "--model-name",
        type=model_name,
        default=DEFAULT_MODEL_NAME,
        help=f"the model's name, as app.serve's --model_name: exports go to {export_base('<name>')}/ "
        f"(default {DEFAULT_MODEL_NAME})",
    )
    base = parser.add_argument(
        "--model-base-path",
        help=f"the export base directory, as app.serve's --model_base_path (default {export_base('<name>')})",
    )
    # The names of before: scripts that use them keep working.
    add_hidden_alias(parser, name, "--name")
    add_hidden_alias(parser, base, "--output")
    parser.add_argument("--version", type=positive_int, help="version number (default: the next free one)")
    parser.add_argument(
        "--format",
        choices=("savedmodel", "ctranslate2"),
        default="savedmodel",
        help="savedmodel (default), or ctranslate2: a CTranslate2 model in saved_models/<name>/ctranslate2/<version>/ "
        "(or --model-base-path), which python -m app.serve also serves (pip install -r requirements-ctranslate2.txt)",
    )
    add_weights_arguments(parser)
    add_ensemble_argument(parser)
    add_decoding_arguments(
        parser,
        beam_size_help="beams of the default signature",
        alpha_chosen_by="the smallest of 0.0, 0.2, ..., 1.6 whose BLEU on the run's validation split is not "
        "significantly below the best alpha's",
    )
    parser.add_argument(
        "--parallel-searches",
        type=positive_int,
        default=DecodingConfig.parallel_searches,
        metavar="P",
        help="split each call's sentences into P beam searches that run side by side on TensorFlow's inter-op "
        "threads: the same translations, one call on several cores; 1 where the server runs one op at a time "
        f"(default {DecodingConfig.parallel_searches})",
    )
    parser.add_argument(
        "--alignment-head",
        type=alignment_head,
        metavar="L:H|L:mean",
        help="the decoder cross-attention the align signature reads for word alignments (with --format "
        "ctranslate2, the attention CTranslate2 returns): layer L's head H, or the mean of its heads; a negative L "
        "counts from the end, written --alignment-head=-1:0 (default: the head the run was trained to align with "
        "--guided-alignment, else the second-to-last layer's mean, layer 0's in a one-layer model)",
    )
    parser.add_argument(
        "--warmup-signatures",
        type=warmup_signature_names,
        metavar="NAMES",
        help="comma-separated signatures that the SavedModel's warm-up requests (assets.extra/"
        "tf_serving_warmup_requests) call as TF Serving or app.serve loads it, so that no client waits for a "
        "signature's first call; 'none': no warm-up file (default: every signature)",
    )
    return parser.parse_args(argv)


def warmup_signature_names(text):
    """--warmup-signatures: "a,b" -> ("a", "b"); "none" -> (): no warm-up file."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected signature names separated by commas, or none, got {text!r}")
    return names


@dataclasses.dataclass(frozen=True)
class ExportPlan:
    """One export, as its flags describe it (`plan_export`)."""

    # The training run whose weights are exported (--model-dir), and which of its weights
    # (--checkpoint, --average-last); with --ensemble, the runs exported as one ensemble.
    model: ModelSource
    # How the default signatures decode. Without --alpha, alpha is the paper's until the
    # search on validation chooses one (`choose_alpha`).
    decoding: DecodingConfig
    # No --alpha: alpha is chosen on the run's validation split (app/export/alpha_search.py).
    choose_alpha: bool
    # "savedmodel" or "ctranslate2" (--format).
    format: str
    # The directory of numbered versions written to (--model-base-path, or saved_models/<name>,
    # with ctranslate2/ inside for --format ctranslate2).
    base: str
    # The version written (--version); None: the next free one.
    version: Optional[int]
    # The model's name (--model-name): the server's, in the command printed at the end.
    model_name: str
    # The head the align signature reads (--alignment-head, as given); None: the default
    # (app/decoding/config.py's `chosen_alignment_head`).
    alignment_head: Optional[AlignmentHead] = None
    # The signatures the warm-up file's requests call (--warmup-signatures); None: all,
    # (): no file.
    warmup_signatures: Optional[tuple] = None


def plan_export(args):
    """The `ExportPlan` of parsed export.py flags `args` (left as they are).

    Raises:
        FlagError: no model directory where --model-dir or --ensemble says; --ensemble
            with --format ctranslate2.
        ValueError: a decoding setting `DecodingConfig` refuses.
    """
    base = args.model_base_path or export_base(args.model_name)
    if args.format == "ctranslate2" and args.ensemble:
        raise FlagError("--ensemble applies to --format savedmodel only; a CTranslate2 model holds one model")
    if args.format == "ctranslate2" and args.warmup_signatures is not None:
        raise FlagError("--warmup-signatures applies to --format savedmodel only; a CTranslate2 model has no "
                        "warm-up file (app.serve warms it up with one call)")
    if args.format == "ctranslate2" and not args.model_base_path:
        from app.export.ctranslate2 import SUBDIRECTORY

        # Beside the SavedModel versions: TF Serving passes over a non-numeric directory.
        base = os.path.join(base, SUBDIRECTORY)
    return ExportPlan(
        model=model_source_from_args(args),
        decoding=DecodingConfig(
            args.beam_size, DecodingConfig.alpha if args.alpha is None else args.alpha, args.max_extra_length,
            args.parallel_searches,
        ),
        choose_alpha=args.alpha is None,
        format=args.format,
        base=base,
        version=args.version,
        model_name=args.model_name,
        alignment_head=args.alignment_head,
        warmup_signatures=args.warmup_signatures,
    )


def run_export(plan):
    """Loads the weights once, chooses alpha on validation unless the plan holds one, and
    writes the version; returns `(its path, a description of the weights)`."""
    from app.export.alpha_search import choose_on_validation
    from app.export.ensemble import describe, ensemble_metadata
    from app.export.saved_model import check_export_base, export, export_metadata

    if plan.format == "ctranslate2":
        from app.export import ctranslate2

        ctranslate2.check_model_dir(plan.model.model_dir)  # before the slow part
    check_export_base(plan.base)  # before the slow part
    print(f"loading the weights of {', '.join(plan.model.model_dirs)}")  # averaging many checkpoints takes a while
    trained = plan.model.load_trained()
    decoding, alpha_search = plan.decoding, None
    # Made first: an alignment head the model lacks is refused before the slow search.
    translator = trained.translator(decoding, plan.alignment_head)
    if plan.choose_alpha:
        # A translator of the same weights, whose translate_with_options decodes every alpha
        # (an ensemble's on its first run's validation split).
        alpha_search = choose_on_validation(translator, plan.model.model_dir)
        decoding = dataclasses.replace(decoding, alpha=alpha_search["chosen"])
        translator = trained.translator(decoding, plan.alignment_head)
    weights = describe(plan.model.model_dirs, trained)
    metadata = {
        **export_metadata(plan.model.model_dir, weights, decoding), "alpha_search": alpha_search,
        **ensemble_metadata(plan.model.model_dirs, trained),
    }
    # The head align reads, resolved: "0:mean", never "-2:mean".
    metadata["alignment_head"] = str(translator.alignment_head)
    if plan.format == "ctranslate2":
        print(f"writing the CTranslate2 model under {plan.base}")
        return ctranslate2.export_ctranslate2(translator, plan.base, plan.version, metadata), weights
    path = export(translator, plan.base, plan.version, metadata, log=print,  # log: what takes time
                  warmup_signatures=plan.warmup_signatures)
    return path, weights


def main(argv=None):
    args = parse_args(argv)
    from app.runtime.quiet_tensorflow import import_tensorflow

    started = time.monotonic()
    import_tensorflow()
    from app.runtime.progress import format_seconds
    from app.export.saved_model import ExportError

    try:
        plan = plan_export(args)
        path, weights = run_export(plan)
    except (ExportError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"exported {weights} to {path} in {format_seconds(time.monotonic() - started)}")
    serve = f"python -m app.serve --model_base_path {plan.base}"
    if plan.model_name != DEFAULT_MODEL_NAME:
        serve += f" --model_name {plan.model_name}"
    print(f"serve it: {serve}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
