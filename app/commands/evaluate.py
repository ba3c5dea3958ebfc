"""Scores a trained model or an exported SavedModel: sacreBLEU, chrF, lowercased BLEU and the paper's BLEU.

    python -m app.evaluate --model-dir runs/tiny-multi30k-en-de --split test_2016_flickr
    python -m app.evaluate --model-dir DIR --average-last 5 --split validation
    python -m app.evaluate --saved-model saved_models/translator --split test_2016_flickr   # its newest version
    python -m app.evaluate --saved-model saved_models/translator/1 --split test_2016_flickr
    python -m app.evaluate --model-dir DIR --source test.en --reference test.de

    python -m app.evaluate --saved-model saved_models/translator --dataset tfds:wmt14_translate/de-en \
        --source-lang en --target-lang de --split test                # newstest2014

Metrics (app/evaluation/metrics.py): sacreBLEU's default BLEU (cased, 13a tokenization of
detokenized text), chrF, lowercased BLEU, lowercased BLEU of Moses-tokenized text (the
figure most Multi30k papers report, measured their way), and the paper's BLEU: cased BLEU
of Moses-tokenized text with German compounds split, the measurement behind the paper's
27.3 / 28.4 / 38.1 / 41.8 on newstest2014. Each is printed with its signature, together
with the decoding settings and speed.
"""

import argparse
import json
import os
import sys
import time

from app.cli.flags import DEFAULT_ALPHA, DEFAULT_BEAM_SIZE, add_decoding_arguments, add_thread_arguments
from app.cli.flags import add_weights_arguments
from app.cli.flag_types import positive_int
from app.cli.output_file import output_file_problem, write_output
from app.cli.quiet_tensorflow import import_tensorflow
from app.evaluation.in_order import in_length_order
from app.evaluation.metrics import score
from app.export.export_info import EXPORT_INFO, read_export_info

# Names a user may give a split, per the dataset's own names.
SPLIT_ALIASES = {"val": "validation", "valid": "validation", "dev": "validation", "test_2016_flickr": "test"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", help="a training run's directory")
    source.add_argument(
        "--saved-model",
        help="an export: its base directory, as app.serve's --model_base_path (its newest version is scored), "
        "or one version directory in it",
    )
    add_weights_arguments(parser, applies_to="with --model-dir: ")
    parser.add_argument(
        "--split", help="validation (default), test_2016_flickr / test, train; not with --source/--reference"
    )
    parser.add_argument("--dataset", help="the dataset of --split (default: the run's or the export's own)")
    parser.add_argument(
        "--source-lang", help="with --saved-model: the source language (default: from its export_info.json)"
    )
    parser.add_argument(
        "--target-lang", help="with --saved-model: the target language (default: from its export_info.json)"
    )
    parser.add_argument(
        "--source", help="a source file to translate instead of a split (with --reference; default: a --split)"
    )
    parser.add_argument("--reference", help="the reference translations of --source (default: a --split's)")
    add_decoding_arguments(
        parser,
        beam_size_help="beams, with --model-dir; a SavedModel uses its exported beam size",
        alpha_chosen_by=f"with --saved-model the alpha it was exported with (export_info.json), else {DEFAULT_ALPHA}",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="sentences per decoding batch (default 64)"
    )
    parser.add_argument(
        "--limit", type=positive_int, metavar="N", help="score only the first N sentences (default: all)"
    )
    parser.add_argument("--output", help="write the translations here, one per line (default: not written)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text (default: text)")
    add_thread_arguments(parser.add_argument_group("CPU threads"), decoding=True)
    # None: not given, so that a flag which cannot apply is told apart from its default.
    parser.set_defaults(beam_size=None)
    args = parser.parse_args(argv)
    conflict = conflicting_flags(args)
    if conflict:
        parser.error(conflict)
    if args.beam_size is None:
        args.beam_size = DEFAULT_BEAM_SIZE
    if args.alpha is None and not args.saved_model:
        args.alpha = DEFAULT_ALPHA  # A SavedModel's is read in main, with its export_info.json.
    if args.split is None and not args.source:
        args.split = "validation"
    return args


def conflicting_flags(args):
    """What is wrong with a combination of flags of which one cannot apply, or None.

    Such a flag was silently ignored before: a SavedModel's weights and beam size are
    fixed at export (--alpha and --max-extra-length reach it through its
    translate_with_options signature), a model directory's settings.json names its
    languages, and --source/--reference files are the data instead of a split.
    """
    files = args.source or args.reference
    if files and not (args.source and args.reference):
        return "--source and --reference go together"
    if args.saved_model:
        for flag, value in (("--checkpoint", args.checkpoint), ("--average-last", args.average_last)):
            if value is not None:
                return f"{flag} applies to --model-dir only; a SavedModel holds the weights it was exported with"
        if args.beam_size is not None:
            return (
                "--beam-size applies to --model-dir only; a SavedModel decodes with the beam size it was "
                "exported with (its export_info.json says which)"
            )
    else:
        for flag, value in (("--source-lang", args.source_lang), ("--target-lang", args.target_lang)):
            if value is not None:
                return f"{flag} applies to --saved-model only; a model directory's settings.json names its languages"
    if files:
        if args.split is not None:
            return "give --split or --source/--reference, not both: each chooses the data to score"
        for flag, value in (("--dataset", args.dataset), ("--source-lang", args.source_lang)):
            if value is not None:
                return f"{flag} applies to --split only, not to --source/--reference files"
    return None


def read_references(args, data_config):
    """`(sources, references, description)` for the split or files the flags name."""
    from data.corpora import open_corpus
    from data.errors import DataError
    from data.text_files import read_parallel_lines

    if args.source:  # with --reference: parse_args refuses either alone
        sources, references = read_parallel_lines(args.source, args.reference)
        # Files of unequal length were refused above; two empty ones would decode an
        # empty batch and score nothing.
        if not sources:
            raise DataError(f"{args.source} and {args.reference} have no lines: there is nothing to score")
        # An empty line scores as a translation of nothing and usually means the files
        # were cut or joined wrongly; training drops such pairs, a score must not.
        for number, (source, reference) in enumerate(zip(sources, references), start=1):
            for path, line in ((args.source, source), (args.reference, reference)):
                if not line.strip():
                    raise DataError(
                        f"line {number} of {path} is empty; every line of --source and "
                        "--reference must hold a sentence (remove the pair from both files)"
                    )
        return sources, references, f"{args.source} -> {args.reference}"
    dataset = args.dataset or data_config.dataset
    # Only the split scored is read (train too only where validation is held out of it).
    corpus = open_corpus(dataset, data_config.source_lang, data_config.target_lang)
    split = SPLIT_ALIASES.get(args.split, args.split)
    if split not in corpus.splits:
        raise DataError(f"{dataset} has no split {args.split!r}; it has {', '.join(sorted(corpus.splits))}")
    sources, references = [], []
    for source, reference in corpus.pairs(split):
        sources.append(source)
        references.append(reference)
    description = f"{dataset} {args.split} {data_config.source_lang}->{data_config.target_lang}"
    return sources, references, description


def saved_model_data_config(args):
    """The DataConfig a SavedModel was trained on: its export_info.json, then the flags.

    Exports made before export_info.json recorded the data name none of it; then
    `--dataset`, `--source-lang` and `--target-lang` must all be given.
    """
    from data.config import DataConfig
    from data.errors import DataError

    path = os.path.join(args.saved_model, EXPORT_INFO)
    info = read_export_info(args.saved_model)
    fields = {
        "dataset": args.dataset or info.get("dataset"),
        "source_lang": args.source_lang or info.get("source_lang"),
        "target_lang": args.target_lang or info.get("target_lang"),
    }
    missing = ["--" + name.replace("_", "-") for name, value in fields.items() if not value]
    if missing:
        raise DataError(
            f"{path} does not say which data {args.saved_model} was trained on; "
            f"give {', '.join(missing)} for --split, or use --source/--reference"
        )
    return DataConfig(**fields, lowercase=bool(info.get("lowercase", False)))


def output_language(args, data_config):
    """`(target language, whether the model writes lowercase)`; None where not known.

    A model directory and a SavedModel scored on a split have a data config. A SavedModel
    scored on --source/--reference files needs none, but its export_info.json still
    names the language the Moses tokenizer must split (German rules differ from English).
    """
    if data_config is not None:
        return data_config.target_lang, data_config.lowercase
    info = read_export_info(args.saved_model) if args.saved_model else {}
    return args.target_lang or info.get("target_lang"), info.get("lowercase")


def check_output(args):
    """Raises DataError unless --output names a file that can be written and that is not
    one of the files being scored (app/cli/output_file.py)."""
    from data.errors import DataError

    problem = output_file_problem(
        args.output, {"--source": args.source, "--reference": args.reference}, "the translations"
    )
    if problem:
        raise DataError(problem)


def read_data_config(args):
    """The DataConfig of the data the weights were trained on; None where none is needed
    (a SavedModel scored on --source/--reference files). Reads settings.json or
    export_info.json only: nothing heavy loads."""
    if args.saved_model:
        return None if (args.source or args.reference) else saved_model_data_config(args)
    from app.model_dir.settings import load_settings

    _, data_config, _ = load_settings(args.model_dir)
    return data_config


def make_translate_fn(args, decoding):
    """`(translate, measure, description of the weights)`: loads the model (the slow part).

    translate: list[str] -> list[str], the translations.
    measure: list[str] -> (lengths, limit), each sentence's subwords with the end token and
        the most the model reads (`Translator.source_lengths`); None for an export made
        before SavedModels held it.
    """
    import tensorflow as tf

    if args.saved_model:
        import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

        loaded = tf.saved_model.load(args.saved_model)
        signature = loaded.signatures["translate_with_options"]
        source_lengths = getattr(loaded, "source_lengths", None)
        if source_lengths is not None:
            # The signature would refuse a too large alpha only once it runs, with a graph
            # assertion; the limit the SavedModel reports is the model's positions.
            from app.decoding.model_search import checked_alpha

            checked_alpha(args.alpha, int(source_lengths(tf.constant([], tf.string))["limit"]))

        def translate(sentences):
            n = len(sentences)
            out = signature(
                inputs=tf.constant(sentences),
                alpha=tf.fill([n], float(args.alpha)),
                max_extra_length=tf.fill([n], int(args.max_extra_length)),
            )
            return [t.decode("utf-8") for t in out["translations"].numpy()]

        return translate, _measure_fn(source_lengths), args.saved_model

    from app.export.saved_model import load_translator

    translator, weights = load_translator(args.model_dir, args.checkpoint, args.average_last, decoding)

    def translate(sentences):
        out = translator.serve(tf.constant(sentences))
        return [t.decode("utf-8") for t in out["translations"].numpy()]

    return translate, _measure_fn(translator.source_lengths), weights


def _measure_fn(source_lengths):
    if source_lengths is None:
        return None
    import tensorflow as tf

    def measure(sentences):
        out = source_lengths(tf.constant(sentences))
        return out["lengths"].numpy().tolist(), int(out["limit"])

    return measure


def overlong_sources(measure, sentences):
    """`[(line number from 1, subwords with the end token)]` of the sentences longer than
    the model reads, and that limit; `([], None)` where `measure` is None."""
    if measure is None or not sentences:
        return [], None
    lengths, limit = measure(sentences)
    return [(number, length) for number, length in enumerate(lengths, start=1) if length > limit], limit


def describe_overlong(overlong, limit, shown=5):
    """The warning for `overlong_sources`' result: how many, and the first `shown`."""
    lines = ", ".join(f"line {number} ({length - 1} subwords)" for number, length in overlong[:shown])
    more = f" and {len(overlong) - shown} more" if len(overlong) > shown else ""
    return (
        f"warning: {len(overlong)} source sentence(s) have more than the {limit - 1} subwords the model "
        f"reads (its {limit} positions, one for the end token); only their first {limit - 1} were "
        f"translated, as the exported model does: {lines}{more}"
    )


def paper_bleu_label(target_lang):
    """The name the paper's BLEU is printed under: what was done to the text, so that nobody
    takes it for sacreBLEU's."""
    from app.evaluation.metrics import SPLITS_COMPOUNDS

    return "paper BLEU (tokenized, compounds split)" if target_lang in SPLITS_COMPOUNDS else "paper BLEU (tokenized)"


def main(argv=None):
    args = parse_args(argv)
    import_tensorflow()
    from app.cli.threads import set_threads_from_flags

    set_threads_from_flags(args, decoding=True)  # before TensorFlow runs an op: its pools are made then
    from app.cli.progress import CountProgress
    from app.decoding.config import DecodingConfig
    from app.export.locate import saved_model_version
    from app.export.saved_model import ExportError
    from data.errors import DataError

    try:
        # Every check before the model loads, so a mistake costs seconds, not a load.
        # The decoding options too for a SavedModel, whose signature would refuse bad
        # ones only once it runs, with a graph assertion instead of a message.
        decoding = DecodingConfig(
            args.beam_size, DEFAULT_ALPHA if args.alpha is None else args.alpha, args.max_extra_length
        )
        if args.saved_model:
            args.saved_model = saved_model_version(args.saved_model)
        if args.alpha is None:
            # The alpha the export chose on validation (or was given), as it serves.
            args.alpha = read_export_info(args.saved_model).get("alpha", DEFAULT_ALPHA)
            decoding = DecodingConfig(args.beam_size, args.alpha, args.max_extra_length)
        data_config = read_data_config(args)
        sources, references, description = read_references(args, data_config)
        if args.output:
            check_output(args)
        target_lang, lowercase_model = output_language(args, data_config)
        translate, measure, weights = make_translate_fn(args, decoding)
    except (DataError, ExportError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    overlong, limit = overlong_sources(measure, sources)
    if overlong:
        print(describe_overlong(overlong, limit), file=sys.stderr)

    translate(sources[:1])  # trace once, so the timing below is decoding only
    started = time.perf_counter()
    progress = CountProgress("decoding", len(sources), "sentences")  # on stderr: stdout holds the scores
    hypotheses = in_length_order(translate, sources, args.batch_size, progress.update)
    seconds = time.perf_counter() - started
    progress.close()
    if args.output and write_output(args.output, "".join(h + "\n" for h in hypotheses)):
        return 1

    result = {
        "data": description,
        "sentences": len(sources),
        "weights": weights,
        "beam_size": args.beam_size if args.model_dir else "as exported",
        "alpha": args.alpha,
        "max_extra_length": args.max_extra_length,
        **score(hypotheses, references, target_lang),
        "seconds": round(seconds, 2),
        "sentences_per_second": round(len(sources) / seconds, 2),
        "words_per_second": round(sum(len(h.split()) for h in hypotheses) / seconds, 1),
        # Whether the model was trained with --lowercase; None: not known (an export
        # older than export_info.json, scored on --source/--reference files).
        "lowercase_model": lowercase_model,
        # Line numbers of the sources cut to the model's positions; None: not known (an
        # export older than Translator.source_lengths).
        "truncated_sources": [number for number, _ in overlong] if measure else None,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{description}: {len(sources)} sentences, weights {weights}")
    print(f"decoding: beam {result['beam_size']}, alpha {args.alpha}, max length input + {args.max_extra_length}")
    if result["lowercase_model"]:
        print("the model was trained with --lowercase and writes lowercase: compare the lowercased scores")
    print(f"BLEU            {result['bleu']:6.2f}  {result['bleu_signature']}")
    print(f"chrF            {result['chrf']:6.2f}  {result['chrf_signature']}")
    print(f"BLEU lowercased {result['bleu_lowercase']:6.2f}  {result['bleu_lowercase_signature']}")
    print(f"BLEU lc, Moses  {result['bleu_moses_lowercase']:6.2f}  {result['bleu_moses_lowercase_signature']}")
    print(f"{paper_bleu_label(target_lang):<15} {result['bleu_paper']:6.2f}  {result['bleu_paper_signature']}")
    print(
        f"length: {result['length_ratio']:.3f} of the references' "
        f"(BLEU's brevity penalty {result['brevity_penalty']:.3f})"
    )
    print(
        f"speed: {result['sentences_per_second']} sentences/s, {result['words_per_second']} words/s ({seconds:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
