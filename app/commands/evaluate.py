"""Scores a trained model or an exported SavedModel: sacreBLEU, chrF, lowercased BLEU and the paper's BLEU.

    python -m app.evaluate --model-dir runs/tiny-multi30k-en-de --split test_2016_flickr
    python -m app.evaluate --model-dir DIR --average-last 5 --split validation
    python -m app.evaluate --saved-model saved_models/translator --split test_2016_flickr   # its newest version
    python -m app.evaluate --saved-model saved_models/translator/1 --split test_2016_flickr
    python -m app.evaluate --model-dir DIR --source test.en --reference test.de

    python -m app.evaluate --saved-model saved_models/translator --test-set wmt14/full  # newstest2014

Metrics (app/evaluation/metrics.py): sacreBLEU's default BLEU (cased, 13a tokenization of
detokenized text), chrF, lowercased BLEU, lowercased BLEU of Moses-tokenized text (the
figure most Multi30k papers report, measured their way), and the paper's BLEU: cased BLEU
of Moses-tokenized text with German compounds split (tensor2tensor's get_ende_bleu.sh),
the measurement behind the paper's 27.3 / 28.4 / 38.1 / 41.8 on newstest2014. Each is
printed with its signature, together with the decoding settings and speed.
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Optional

from app.cli.flags import cpu_threads_from_args, add_decoding_arguments, add_thread_arguments
from app.cli.flag_types import FlagError, positive_int
from app.cli.model_source import add_model_source_arguments, model_source_from_args, weights_flags_conflict
from app.cli.output_file import output_file_problem, write_output
from app.runtime.quiet_tensorflow import import_tensorflow
from app.decoding.config import DecodingConfig
from app.decoding.truncation import subwords_kept
from app.evaluation.in_order import in_length_order
from app.runtime.threads import CpuThreads
from app.evaluation.metrics import score
from app.export.export_info import EXPORT_INFO, exported_decoding, read_export_info
from app.export.model_source import ModelSource

# Names a user may give a split, per the dataset's own names.
SPLIT_ALIASES = {"val": "validation", "valid": "validation", "dev": "validation", "test_2016_flickr": "test"}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_source_arguments(parser, required=True)
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
    parser.add_argument(
        "--test-set",
        metavar="NAME",
        help="a test set of sacreBLEU's registry in the model's language pair, fetched into sacreBLEU's cache "
        "(wmt14/full: newstest2014 as the paper scored it; `sacrebleu --list` names them); "
        "not with --split or --source/--reference (default: none, a --split)",
    )
    add_decoding_arguments(
        parser,
        beam_size_help="beams, with --model-dir; a SavedModel uses its exported beam size",
        alpha_chosen_by="with --saved-model the alpha it was exported with (export_info.json), "
        f"else {DecodingConfig.alpha}",
        max_extra_length_from="with --saved-model the one it was exported with (export_info.json), "
        f"else {DecodingConfig.max_extra_length}",
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
    return parser


def parse_args(argv=None):
    """The parsed flags: exits 2 naming a flag argparse refuses, or one that contradicts another."""
    parser = build_parser()
    args = parser.parse_args(argv)
    conflict = conflicting_flags(args)
    if conflict:
        parser.error(conflict)
    return args


@dataclasses.dataclass(frozen=True)
class EvaluationPlan:
    """One evaluation, as its flags describe it (`plan_evaluation`)."""

    # The weights: a training run (--model-dir, with --checkpoint and --average-last) or
    # one SavedModel version (--saved-model: its newest version where it names an export base).
    model: ModelSource
    # The data: a split (--split, validation unless --source is given) of --dataset, the
    # run's or the export's own where None; with --saved-model, --source-lang and
    # --target-lang override its export_info.json. Or the files --source and --reference,
    # or a test set of sacreBLEU's (--test-set) in the model's language pair.
    split: Optional[str]
    dataset: Optional[str]
    source_lang: Optional[str]
    target_lang: Optional[str]
    source: Optional[str]
    reference: Optional[str]
    test_set: Optional[str]
    # How it decodes: --beam-size (with --model-dir; a SavedModel decodes with its own),
    # --alpha and --max-extra-length (a SavedModel's own, as exported, where not given).
    decoding: DecodingConfig
    # Sentences per decoding call (--batch-size), the first N only (--limit; None: all).
    batch_size: int
    limit: Optional[int]
    # Where the translations are written (--output; None: nowhere), and --json.
    output: Optional[str]
    json: bool
    # TensorFlow's CPU thread pools (--intra-op-threads, --inter-op-threads).
    threads: CpuThreads


def plan_evaluation(args):
    """The `EvaluationPlan` of parsed app.evaluate flags `args` (left as they are). Reads
    the disk: whether --model-dir is there; for a SavedModel, its newest version and the
    alpha and extra length its export_info.json says it decodes with.

    Raises:
        FlagError: no model directory or no SavedModel where the flag says.
        ValueError: an unreadable export_info.json, or a setting `DecodingConfig` refuses.
    """
    model = model_source_from_args(args)
    # A SavedModel decodes as it serves: the alpha the export chose on validation (or was
    # given) and its extra length, unless the flags say otherwise.
    exported = exported_decoding(model.saved_model) if model.saved_model else None
    alpha, max_extra_length = args.alpha, args.max_extra_length
    if alpha is None:
        alpha = exported.alpha if exported and exported.alpha is not None else DecodingConfig.alpha
    if max_extra_length is None:
        max_extra_length = exported.max_extra_length if exported else DecodingConfig.max_extra_length
    beam_size = DecodingConfig.beam_size if args.beam_size is None else args.beam_size
    return EvaluationPlan(
        model=model,
        split="validation" if args.split is None and not (args.source or args.test_set) else args.split,
        dataset=args.dataset,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        source=args.source,
        reference=args.reference,
        test_set=args.test_set,
        decoding=DecodingConfig(beam_size, alpha, max_extra_length),
        batch_size=args.batch_size,
        limit=args.limit,
        output=args.output,
        json=args.json,
        threads=cpu_threads_from_args(args, decoding=True),
    )


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
    problem = weights_flags_conflict(args)
    if problem:
        return problem
    if args.saved_model:
        if args.beam_size is not None:
            return (
                "--beam-size applies to --model-dir only; a SavedModel decodes with the beam size it was "
                "exported with (its export_info.json says which)"
            )
    else:
        for flag, value in (("--source-lang", args.source_lang), ("--target-lang", args.target_lang)):
            if value is not None:
                return f"{flag} applies to --saved-model only; a model directory's settings.json names its languages"
    if args.test_set and (files or args.split is not None or args.dataset is not None):
        given = "--source/--reference" if files else "--split" if args.split is not None else "--dataset"
        return f"give --test-set or {given}, not both: each chooses the data to score"
    if files:
        if args.split is not None:
            return "give --split or --source/--reference, not both: each chooses the data to score"
        for flag, value in (("--dataset", args.dataset), ("--source-lang", args.source_lang)):
            if value is not None:
                return f"{flag} applies to --split only, not to --source/--reference files"
    return None


def read_references(plan, data_config):
    """`(sources, references, description)` for the split, files or test set of the plan."""
    from data.corpora import open_corpus
    from data.errors import DataError
    from data.text_files import read_parallel_lines

    if plan.test_set:
        return read_sacrebleu_test_set(plan, data_config)
    if plan.source:  # with --reference: parse_args refuses either alone
        sources, references = read_parallel_lines(plan.source, plan.reference)
        # Files of unequal length were refused above; two empty ones would decode an
        # empty batch and score nothing.
        if not sources:
            raise DataError(f"{plan.source} and {plan.reference} have no lines: there is nothing to score")
        # An empty line scores as a translation of nothing and usually means the files
        # were cut or joined wrongly; training drops such pairs, a score must not.
        for number, (source, reference) in enumerate(zip(sources, references), start=1):
            for path, line in ((plan.source, source), (plan.reference, reference)):
                if not line.strip():
                    raise DataError(
                        f"line {number} of {path} is empty; every line of --source and "
                        "--reference must hold a sentence (remove the pair from both files)"
                    )
        return sources, references, f"{plan.source} -> {plan.reference}"
    dataset = plan.dataset or data_config.dataset
    # Only the split scored is read (train too only where validation is held out of it).
    corpus = open_corpus(dataset, data_config.source_lang, data_config.target_lang)
    split = SPLIT_ALIASES.get(plan.split, plan.split)
    if split not in corpus.splits:
        raise DataError(f"{dataset} has no split {plan.split!r}; it has {', '.join(sorted(corpus.splits))}")
    sources, references = [], []
    for source, reference in corpus.pairs(split):
        sources.append(source)
        references.append(reference)
    description = f"{dataset} {plan.split} {data_config.source_lang}->{data_config.target_lang}"
    return sources, references, description


def read_sacrebleu_test_set(plan, data_config):
    """`(sources, references, description)` of `--test-set` in the model's language pair
    (data/test_sets.py); a note on stderr where the name is not what it seems."""
    from data.errors import DataError
    from data.test_sets import NOTES, read_test_set

    if data_config is not None:
        source_lang, target_lang = data_config.source_lang, data_config.target_lang
    else:  # a SavedModel: its export_info.json, or the flags
        info = read_export_info(plan.model.saved_model)
        source_lang = plan.source_lang or info.get("source_lang")
        target_lang = plan.target_lang or info.get("target_lang")
        if not (source_lang and target_lang):
            raise DataError(
                f"{os.path.join(plan.model.saved_model, EXPORT_INFO)} does not name the languages of "
                f"{plan.model.saved_model}; give --source-lang and --target-lang for --test-set"
            )
    if plan.test_set in NOTES:
        print(f"note: {NOTES[plan.test_set]}", file=sys.stderr)
    test_set = read_test_set(plan.test_set, source_lang, target_lang)
    return test_set.sources, test_set.references, f"sacreBLEU test set {test_set.name} {test_set.langpair}"


def saved_model_data_config(plan):
    """The DataConfig a SavedModel was trained on: its export_info.json, then the flags.

    Exports made before export_info.json recorded the data name none of it; then
    `--dataset`, `--source-lang` and `--target-lang` must all be given.
    """
    from data.config import DataConfig
    from data.errors import DataError

    path = os.path.join(plan.model.saved_model, EXPORT_INFO)
    info = read_export_info(plan.model.saved_model)
    fields = {
        "dataset": plan.dataset or info.get("dataset"),
        "source_lang": plan.source_lang or info.get("source_lang"),
        "target_lang": plan.target_lang or info.get("target_lang"),
    }
    missing = ["--" + name.replace("_", "-") for name, value in fields.items() if not value]
    if missing:
        raise DataError(
            f"{path} does not say which data {plan.model.saved_model} was trained on; "
            f"give {', '.join(missing)} for --split, or use --source/--reference"
        )
    return DataConfig(**fields, lowercase=bool(info.get("lowercase", False)))


def output_language(plan, data_config):
    """`(target language, whether the model writes lowercase)`; None where not known.

    A model directory and a SavedModel scored on a split have a data config. A SavedModel
    scored on --source/--reference files needs none, but its export_info.json still
    names the language the Moses tokenizer must split (German rules differ from English).
    """
    if data_config is not None:
        return data_config.target_lang, data_config.lowercase
    info = read_export_info(plan.model.saved_model) if plan.model.saved_model else {}
    return plan.target_lang or info.get("target_lang"), info.get("lowercase")


def check_output(plan):
    """Raises DataError unless --output names a file that can be written and that is not
    one of the files being scored (app/cli/output_file.py)."""
    from data.errors import DataError

    problem = output_file_problem(
        plan.output, {"--source": plan.source, "--reference": plan.reference}, "the translations"
    )
    if problem:
        raise DataError(problem)


def read_data_config(plan):
    """The DataConfig of the data the weights were trained on; None where none is needed
    (a SavedModel scored on --source/--reference files). Reads settings.json or
    export_info.json only: nothing heavy loads."""
    if plan.model.saved_model:
        return None if (plan.source or plan.reference or plan.test_set) else saved_model_data_config(plan)
    from app.model_dir.settings import load_settings

    _, data_config, _ = load_settings(plan.model.model_dir)
    return data_config


def make_translate_fn(plan):
    """`(translate, measure, description of the weights)`: loads the model (the slow part).

    translate: list[str] -> list[str], the translations.
    measure: list[str] -> (lengths, limit), each sentence's subwords with the end token and
        the most the model reads (`Translator.source_lengths`); None for an export made
        before SavedModels held it.
    """
    import tensorflow as tf

    if plan.model.saved_model:
        loaded = plan.model.load_saved_model()
        signature = loaded.signatures["translate_with_options"]
        source_lengths = getattr(loaded, "source_lengths", None)
        if source_lengths is not None:
            # The signature would refuse a too large alpha only once it runs, with a graph
            # assertion; the limit the SavedModel reports is the model's positions.
            from app.decoding.model_search import checked_alpha

            checked_alpha(plan.decoding.alpha, int(source_lengths(tf.constant([], tf.string))["limit"]))

        def translate(sentences):
            n = len(sentences)
            out = signature(
                inputs=tf.constant(sentences),
                alpha=tf.fill([n], float(plan.decoding.alpha)),
                max_extra_length=tf.fill([n], int(plan.decoding.max_extra_length)),
            )
            return [t.decode("utf-8") for t in out["translations"].numpy()]

        return translate, _measure_fn(source_lengths), plan.model.saved_model

    translator, weights = plan.model.load_translator(plan.decoding)

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
    kept = subwords_kept(limit)
    return (
        f"warning: {len(overlong)} source sentence(s) have more than the {kept} subwords the model "
        f"reads (its {limit} positions, one for the end token); only their first {kept} were "
        f"translated, as the exported model does: {lines}{more}"
    )


def paper_bleu_label(target_lang):
    """The name the paper's BLEU is printed under: what was done to the text, so that nobody
    takes it for sacreBLEU's."""
    from app.evaluation.metrics import SPLITS_COMPOUNDS

    return "paper BLEU (tokenized, compounds split)" if target_lang in SPLITS_COMPOUNDS else "paper BLEU (tokenized)"


def main(argv=None):
    args = parse_args(argv)
    try:
        # The flags' checks first, TensorFlow's import after (seconds).
        plan = plan_evaluation(args)
    except FlagError as error:
        build_parser().error(str(error))
    except ValueError as error:  # an export_info.json or a decoding setting that cannot be used
        print(f"error: {error}", file=sys.stderr)
        return 1
    import_tensorflow()
    plan.threads.apply()  # before TensorFlow runs an op: its pools are made then
    from app.runtime.progress import CountProgress
    from app.export.saved_model import ExportError
    from data.errors import DataError

    try:
        # Every check before the model loads, so a mistake costs seconds, not a load.
        # The decoding options too for a SavedModel, whose signature would refuse bad
        # ones only once it runs, with a graph assertion instead of a message.
        data_config = read_data_config(plan)
        sources, references, description = read_references(plan, data_config)
        if plan.output:
            check_output(plan)
        target_lang, lowercase_model = output_language(plan, data_config)
        translate, measure, weights = make_translate_fn(plan)
    except (DataError, ExportError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if plan.limit:
        sources, references = sources[: plan.limit], references[: plan.limit]
    overlong, limit = overlong_sources(measure, sources)
    if overlong:
        print(describe_overlong(overlong, limit), file=sys.stderr)

    translate(sources[:1])  # trace once, so the timing below is decoding only
    started = time.perf_counter()
    progress = CountProgress("decoding", len(sources), "sentences")  # on stderr: stdout holds the scores
    hypotheses = in_length_order(translate, sources, plan.batch_size, progress.update)
    seconds = time.perf_counter() - started
    progress.close()
    if plan.output and write_output(plan.output, "".join(h + "\n" for h in hypotheses)):
        return 1
    result = results(
        plan, description, sources, hypotheses, references=references, target_lang=target_lang, weights=weights,
        seconds=seconds,
    )
    result.update(
        # Whether the model was trained with --lowercase; None: not known (an export
        # older than export_info.json, scored on --source/--reference files).
        lowercase_model=lowercase_model,
        # Line numbers of the sources cut to the model's positions; None: not known (an
        # export older than Translator.source_lengths).
        truncated_sources=[number for number, _ in overlong] if measure else None,
    )
    if plan.json:
        print(json.dumps(result))
        return 0
    print_results(result, plan, target_lang, seconds)
    return 0


def results(plan, description, sources, hypotheses, *, references, target_lang, weights, seconds):
    """What `--json` prints, but for lowercase_model and truncated_sources: the data, the
    weights, the decoding, the scores and the speed."""
    return {
        "data": description,
        "sentences": len(sources),
        "weights": weights,
        "beam_size": plan.decoding.beam_size if plan.model.model_dir else "as exported",
        "alpha": plan.decoding.alpha,
        "max_extra_length": plan.decoding.max_extra_length,
        **score(hypotheses, references, target_lang),
        "seconds": round(seconds, 2),
        "sentences_per_second": round(len(sources) / seconds, 2),
        "words_per_second": round(sum(len(h.split()) for h in hypotheses) / seconds, 1),
    }


def print_results(result, plan, target_lang, seconds):
    """The text app.evaluate prints without --json."""
    print(f"{result['data']}: {result['sentences']} sentences, weights {result['weights']}")
    print(
        f"decoding: beam {result['beam_size']}, alpha {plan.decoding.alpha}, "
        f"max length input + {plan.decoding.max_extra_length}"
    )
    if result["lowercase_model"]:
        print("the model was trained with --lowercase and writes lowercase: compare the lowercased scores")
    print(f"BLEU            {result['bleu']:6.2f}  {result['bleu_signature']}")
    print(f"chrF            {result['chrf']:6.2f}  {result['chrf_signature']}")
    print(f"BLEU lowercased {result['bleu_lowercase']:6.2f}  {result['bleu_lowercase_signature']}")
    print(f"BLEU lc, Moses  {result['bleu_moses_lowercase']:6.2f}  {result['bleu_moses_lowercase_signature']}")
    print(f"BLEU lc.norm.tok {result['bleu_lc_norm_tok']:5.2f}  {result['bleu_lc_norm_tok_signature']}")
    print(f"{paper_bleu_label(target_lang):<15} {result['bleu_paper']:6.2f}  {result['bleu_paper_signature']}")
    print(
        f"length: {result['length_ratio']:.3f} of the references' "
        f"(BLEU's brevity penalty {result['brevity_penalty']:.3f})"
    )
    print(
        f"speed: {result['sentences_per_second']} sentences/s, {result['words_per_second']} words/s ({seconds:.1f} s)"
    )


if __name__ == "__main__":
    sys.exit(main())
