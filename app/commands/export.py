"""Exports a trained model as a versioned SavedModel for TensorFlow Serving: `python export.py`
at the root, or `transformer-export` once installed.

    python export.py --model-dir runs/tiny-multi30k-en-de        # saved_models/translator/<next>/
    python export.py --model-dir DIR --checkpoint best           # the best by validation BLEU
    python export.py --model-dir DIR --average-last 5            # average the newest 5 checkpoints
    python export.py --model-dir DIR --model-name en-de --version 3   # saved_models/en-de/3/
    python export.py --model-dir DIR --model-base-path /srv/models/translator   # /srv/models/translator/<next>/
    python export.py --model-dir DIR --alpha 0.6                 # this alpha: no search on validation
    python export.py --model-dir DIR --format ctranslate2        # saved_models/translator/ctranslate2/<next>/

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
import os
import sys
import time


def parse_args(argv=None):
    # None of these imports TensorFlow: --help and a bad value answer at once.
    from app.cli.flags import DEFAULT_PARALLEL_SEARCHES, add_decoding_arguments, add_weights_arguments
    from app.cli.flag_types import add_hidden_alias, model_name, positive_int

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model-dir",
        default=os.path.join("runs", "tiny-multi30k-en-de"),
        help="the training run (default runs/tiny-multi30k-en-de, the default run's)",
    )
    name = parser.add_argument(
        "--model-name",
        type=model_name,
        default="translator",
        help="the model's name, as app.serve's --model_name: exports go to saved_models/<name>/ (default translator)",
    )
    base = parser.add_argument(
        "--model-base-path",
        help="the export base directory, as app.serve's --model_base_path (default saved_models/<name>)",
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
    add_decoding_arguments(
        parser,
        beam_size_help="beams of the default signature",
        alpha_chosen_by="the smallest of 0.0, 0.2, ..., 1.6 whose BLEU on the run's validation split is not "
        "significantly below the best alpha's",
    )
    parser.add_argument(
        "--parallel-searches",
        type=positive_int,
        default=DEFAULT_PARALLEL_SEARCHES,
        metavar="P",
        help="split each call's sentences into P beam searches that run side by side on TensorFlow's inter-op "
        "threads: the same translations, one call on several cores; 1 where the server runs one op at a time "
        f"(default {DEFAULT_PARALLEL_SEARCHES})",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from app.cli.quiet_tensorflow import import_tensorflow

    started = time.monotonic()
    import_tensorflow()
    from app.cli.progress import format_seconds
    from app.decoding.config import DecodingConfig
    from app.export.alpha_search import choose_on_validation
    from app.export.saved_model import ExportError, check_export_base, export, export_metadata, load_translator

    try:
        # Without --alpha, the paper's until the search on validation replaces it.
        alpha = DecodingConfig.alpha if args.alpha is None else args.alpha
        decoding = DecodingConfig(args.beam_size, alpha, args.max_extra_length, args.parallel_searches)
        base = args.model_base_path or os.path.join("saved_models", args.model_name)
        if args.format == "ctranslate2":
            from app.export import ctranslate2

            ctranslate2.check_model_dir(args.model_dir)  # before the slow part
            # Beside the SavedModel versions: TF Serving passes over a non-numeric directory.
            base = args.model_base_path or os.path.join(base, ctranslate2.SUBDIRECTORY)
        check_export_base(base)  # before the slow part
        print(f"loading the weights of {args.model_dir}")  # averaging many checkpoints takes a while
        translator, weights = load_translator(args.model_dir, args.checkpoint, args.average_last, decoding)
        alpha_search = None
        if args.alpha is None:
            alpha_search = choose_on_validation(translator, args.model_dir)
            translator.set_default_alpha(alpha_search["chosen"])
        metadata = {**export_metadata(args.model_dir, weights, translator.decoding), "alpha_search": alpha_search}
        if args.format == "ctranslate2":
            print(f"writing the CTranslate2 model under {base}")
            path = ctranslate2.export_ctranslate2(translator, base, args.version, metadata)
        else:
            path = export(translator, base, args.version, metadata, log=print)  # says what takes the time
    except (ExportError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"exported {weights} to {path} in {format_seconds(time.monotonic() - started)}")
    serve = f"python -m app.serve --model_base_path {base}"
    if args.model_name != "translator":
        serve += f" --model_name {args.model_name}"
    print(f"serve it: {serve}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
