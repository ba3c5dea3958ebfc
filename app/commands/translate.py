"""Translates text with a trained model, without a server: one output line per input line.

    python -m app.translate < test.en > test.de                   # saved_models/translator, its newest version
    python -m app.translate --saved-model saved_models/translator/2 --input test.en --output test.de
    python -m app.translate --model-dir runs/tiny-multi30k-en-de --beam-size 8 --alpha 1.0 --input test.en
    python -m app.translate --input test.en --nbest 4 > nbest.tsv
    python -m app.translate --input mono.de --sampling-topk 10 --seed 1 > back.en     # back-translation
    python -m app.translate --input test.en --glossary terms.tsv --no-repeat-ngram-size 3   # steered
    python -m app.translate --input test.en --constraints phrases.txt --prefixes starts.txt
    python -m app.translate --input page.en --markup html --alignments page.align > page.de   # tags kept
    python -m app.translate --input letter.en --document > letter.de    # paragraphs, split into sentences

The model: an export (`--saved-model`, its base directory for the newest version, or one
version; saved_models/translator by default) or a training run (`--model-dir`, with
`--checkpoint` / `--average-last`). Lines are read from `--input` (default: standard
input) and decoded in batches of `--batch-size` sentences of similar length, then put
back in input order. Empty and whitespace-only lines are not decoded: they come out as
empty lines (in the n-best table, as no rows).

Decoding. Beam search, as export.py and the server do. A SavedModel's beam size is fixed
at export: `--beam-size` may be that one or 1 (its `greedy` signature); `--alpha` and
`--max-extra-length` reach it through its `translate_with_options` signature, and
default to the export's own. Sampling, for back-translation: any of `--sampling-topk K`
(the K most likely tokens, 0 = all), `--sampling-topp P` (the fewest most likely tokens
whose probability reaches P) and `--sampling-temperature T` draws one translation per
line instead (app/decoding/sampling.py; the export's `sample` signature). It is
reproducible: line n (from 1) draws with the seed `--seed` x 2**32 + n, so a line's
translation depends on the seed, its text and its line number, not on the batch.

Steering (docs/steering.md), beam search only, through the export's `constrained`
signature (with --model-dir, the same search in memory, at --beam-size): `--constraints
FILE` gives line n's target phrases (separated by tabs; an empty line: none), which its
translation must hold; `--prefixes FILE` the text line n's translation starts with (the
search goes on from it); `--glossary FILE` a TSV of source term <TAB> target term, whose
target terms become constraints of the lines that hold their source terms (whole words,
any case: app/decoding/glossary.py; with --constraints, both); `--no-repeat-ngram-size N`
forbids any N tokens in a row twice. A file's line count must be the input's, checked
before anything is decoded. Not with sampling, --nbest or --beam-size 1: the signature
runs beam search and gives its best translation. An empty or blank input line stays an
empty output line, whatever its prefix or constraints say: there is nothing to
translate. Where no translation within the length limit holds every constraint of a
line, the best one found is written all the same and standard error says which line.

Markup, documents and word alignments (docs/serving.md#markup-documents-and-word-alignments),
beam search only, through the export's `align` signature (with --model-dir, the same search
in memory, at --beam-size): `--alignments FILE` also writes one Pharaoh line per output line,
`i-j` linking source word i to translation word j (from 0; a word is a run of characters that
are not White_Space), an empty line for a line not translated; `--markup html` keeps each
line's inline HTML through translation, every tag once around the translation of the words
it enclosed (data/markup.py), and refuses malformed markup before the model loads, naming its
line and column; `--document` reads paragraphs separated by blank lines, splits each into
sentences (in the source language of the export's export_info.json, or of the run) and
writes one line per paragraph, its sentences' translations joined by a space, and an empty
line per blank line (data/documents.py). The three combine; with --markup the alignments
link the words of the plain text. Not with sampling, --nbest, steering or --beam-size 1,
nor with a SavedModel's --alpha or --max-extra-length: `align` decodes with the export's
settings; --document not with --scores, as a paragraph's sentences have a score each.

Output (UTF-8, on `--output` written whole at the end, or standard output; a tab or line
break inside a translation is written as a space):

    default      translation
    --scores     score <TAB> translation
    --nbest K    line <TAB> rank <TAB> score <TAB> translation     (K rows per line, best first)

In the n-best table `line` is the input's line number and `rank` the hypothesis's, both
from 1. Scores have six decimals: beam search's length-normalized log-probability
(sum of log-probs / ((5 + length) / 6) ** alpha, app/decoding/beam_search.py); with
sampling, the plain sum of the model's log-probabilities of the drawn tokens.
"""

import argparse
import dataclasses
import os
import sys
from typing import Optional

from app.cli.flag_types import FlagError, int_at_least, positive_int
from app.cli.flags import cpu_threads_from_args, add_decoding_arguments
from app.cli.model_source import add_model_source_arguments, model_source_from_args, weights_flags_conflict
from app.cli.flags import add_thread_arguments
from app.cli.output_file import STDIN, output_file_problem, write_output
from app.cli.steering import SteeringFlags, add_steering_arguments, read_steering, steering_from_args
from app.decoding.config import DecodingConfig, SamplingConfig, broken_rule
from app.evaluation.in_order import in_length_order
from app.runtime.threads import CpuThreads
from app.export.model_source import ModelSource
from data.documents import Paragraph, read_blocks, translate_blocks, write_blocks
from data.markup import MarkupError, strip, translate_markup

# Digits after the point of every score.
DECIMALS = 6
# The markup --markup keeps (data/markup.py): inline HTML.
MARKUP_KINDS = ("html",)
# The language sentences are split in where an export does not record its own: sentencex's fallback.
FALLBACK_LANGUAGE = "en"


def _seed(text):
    value = int_at_least(0)(text)
    if value > SamplingConfig.MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most {SamplingConfig.MAX_SEED}, got {value}")
    return value


def _sampling_type(name):
    """The argparse type of the sampling setting `name`: a number within its rules
    (app/decoding/config.py), or argparse's error naming the flag."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        rule = broken_rule(name, value)
        if rule is not None:
            raise argparse.ArgumentTypeError(f"{rule.phrase}, got {text}")
        return value

    parse.__name__ = name
    return parse


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m app.translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_source_arguments(parser)
    parser.add_argument(
        "--input", metavar="FILE", default=STDIN, help="the text to translate (default: standard input)"
    )
    parser.add_argument("--output", metavar="FILE", help="write the translations here (default: standard output)")
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="sentences decoded together (default 64)"
    )
    add_decoding_arguments(
        parser,
        beam_size_help="beams; 1 is greedy. A SavedModel decodes with the beam size it was exported with "
        "(its default) or 1; a --model-dir with any",
        alpha_chosen_by=f"with a SavedModel the export's, with --model-dir {DecodingConfig.alpha}",
    )
    parser.add_argument(
        "--nbest", type=positive_int, metavar="K",
        help="write the K best translations of each line, as a TSV table (default: the best only)",
    )
    parser.add_argument(
        "--scores", action="store_true", help="write each translation's score before it (default: the translation only)"
    )
    sampling = parser.add_argument_group("sampling (one random translation per line, instead of beam search)")
    default = SamplingConfig()
    sampling.add_argument(
        "--sampling-topk",
        type=int_at_least(0),
        metavar="K",
        help=f"draw among the K most likely tokens; 0: all (default {default.top_k})",
    )
    sampling.add_argument(
        "--sampling-topp",
        type=_sampling_type("top_p"),
        metavar="P",
        help=f"draw among the fewest most likely tokens whose probability reaches P (default {default.top_p:g}: all)",
    )
    sampling.add_argument(
        "--sampling-temperature",
        type=_sampling_type("temperature"),
        metavar="T",
        help=f"divide the logits by T (default {default.temperature:g})",
    )
    sampling.add_argument("--seed", type=_seed, help=f"the random seed (default {default.seed})")
    add_steering_arguments(parser)
    add_align_arguments(parser)
    add_thread_arguments(parser.add_argument_group("CPU threads"), decoding=True)
    # None: not given, so that a flag that cannot apply is told apart from its default.
    parser.set_defaults(beam_size=None, max_extra_length=None)
    return parser


def add_align_arguments(parser):
    """--alignments, --markup and --document: what the export's align signature makes possible."""
    group = parser.add_argument_group(
        "markup, documents and word alignments (the export's align signature, beam search only)"
    )
    group.add_argument(
        "--alignments",
        metavar="FILE",
        help="also write one Pharaoh line per output line here, i-j linking source word i to translation word j, "
        "an empty line for a line not translated (default: none)",
    )
    group.add_argument(
        "--markup",
        choices=MARKUP_KINDS,
        help="keep each line's inline markup (each paragraph's, with --document) through translation, every tag "
        "once around the translation of the words it enclosed; malformed markup is refused before the model "
        "loads (default: none, plain text)",
    )
    group.add_argument(
        "--document",
        action="store_true",
        help="read paragraphs separated by blank lines, translate each sentence by sentence and write it as one "
        "line, blank lines kept (default: one sentence per line)",
    )
    return group


def parse_args(argv=None):
    """`(parser, flags)`: exits 2 naming a flag argparse refuses, or one that contradicts another."""
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = conflicting_flags(args)
    if problem:
        parser.error(problem)
    return parser, args


@dataclasses.dataclass(frozen=True)
class ExportOverrides:
    """What a SavedModel is asked to decode otherwise than it was exported to: the flags
    given, None where not given (the export's own then)."""

    beam_size: Optional[int] = None  # its own or 1 (its greedy signature)
    alpha: Optional[float] = None  # with max_extra_length: its translate_with_options signature
    max_extra_length: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class TranslatePlan:
    """One translation run, as its flags describe it (`plan_translation`)."""

    # The model: one SavedModel version (--saved-model, its base's newest version;
    # saved_models/translator by default), or a training run (--model-dir, with
    # --checkpoint and --average-last).
    model: ModelSource
    # The lines read (--input; STDIN: standard input) and where the output goes (--output;
    # None: standard output).
    input: str
    output: Optional[str]
    # Sentences decoded together (--batch-size).
    batch_size: int
    # The K best of each line as a table (--nbest; None: the best only), the scores (--scores).
    nbest: Optional[int]
    scores: bool
    # How beam search decodes: with --model-dir, the flags over DecodingConfig's defaults;
    # a SavedModel decodes as exported, but for `overrides`. The one of them that applies.
    decoding: Optional[DecodingConfig]
    overrides: Optional[ExportOverrides]
    # Sampling instead of beam search (--sampling-topk, -topp, -temperature, --seed), or None.
    sampling: Optional[SamplingConfig]
    # Beam search steered through the constrained signature (--constraints, --prefixes,
    # --glossary, --no-repeat-ngram-size), or None.
    steering: Optional[SteeringFlags]
    # Through the align signature: the Pharaoh lines' file (--alignments; None: none), the
    # markup kept (--markup: "html"; None: plain text), paragraphs rather than lines (--document).
    alignments: Optional[str]
    markup: Optional[str]
    document: bool
    # TensorFlow's CPU thread pools (--intra-op-threads, --inter-op-threads).
    threads: CpuThreads

    @property
    def aligned(self):
        """Whether the lines go through the align signature (--alignments, --markup, --document)."""
        return bool(self.alignments or self.markup or self.document)


def plan_translation(args):
    """The `TranslatePlan` of parsed app.translate flags `args` (left as they are), every
    check that needs no model done. Reads the disk: the newest SavedModel version under
    --saved-model, and whether --model-dir, --input and --output can be used.

    Raises:
        FlagError: naming the flag: no export where --saved-model says, no --model-dir
            directory, an --input, --constraints, --prefixes or --glossary that is no
            file, an --output or --alignments that cannot be written.
    """
    model = model_source_from_args(args)
    if args.input != STDIN and os.path.isdir(args.input):
        raise FlagError(f"--input {args.input}: is a directory; give the file of sentences to translate")
    if args.input != STDIN and not os.path.isfile(args.input):
        raise FlagError(f"--input {args.input}: no such file")
    problem = args.output and output_file_problem(args.output, {"--input": args.input}, "the translations")
    problem = problem or args.alignments and output_file_problem(
        args.alignments, {"--input": args.input, "--output": args.output}, "the word alignments", flag="--alignments"
    )
    if problem:
        raise FlagError(problem)
    saved_model = model.saved_model
    return TranslatePlan(
        model=model,
        input=args.input,
        output=args.output,
        batch_size=args.batch_size,
        nbest=args.nbest,
        scores=args.scores,
        decoding=None if saved_model else DecodingConfig(
            DecodingConfig.beam_size if args.beam_size is None else args.beam_size,
            DecodingConfig.alpha if args.alpha is None else args.alpha,
            DecodingConfig.max_extra_length if args.max_extra_length is None else args.max_extra_length,
        ),
        overrides=ExportOverrides(args.beam_size, args.alpha, args.max_extra_length) if saved_model else None,
        sampling=sampling_from_flags(args),
        steering=steering_from_args(args),
        alignments=args.alignments,
        markup=args.markup,
        document=args.document,
        threads=cpu_threads_from_args(args, decoding=True),
    )


def sampling_from_flags(args):
    """The `SamplingConfig` the flags ask for, its defaults where not given; None: beam search."""
    if not sampling_on(args):
        return None
    given = dict(top_k=args.sampling_topk, top_p=args.sampling_topp, temperature=args.sampling_temperature,
                 seed=args.seed)
    return SamplingConfig(**{name: value for name, value in given.items() if value is not None})


def sampling_on(args):
    return any(value is not None for value in (args.sampling_topk, args.sampling_topp, args.sampling_temperature))


def conflicting_flags(args):
    """What is wrong with a combination of flags, or None."""
    problem = weights_flags_conflict(args)
    if problem:
        return problem
    if sampling_on(args):
        for flag, given in (("--nbest", args.nbest), ("--beam-size", args.beam_size), ("--alpha", args.alpha)):
            if given is not None:
                return f"{flag} applies to beam search, not to sampling (--sampling-topk/-topp/-temperature)"
    elif args.seed is not None:
        return "--seed applies to sampling only: give --sampling-topk, --sampling-topp or --sampling-temperature"
    problem = steering_conflict(args) or align_conflict(args)
    if problem:
        return problem
    if args.nbest is not None:
        if args.scores:
            return "--scores: the --nbest table holds the scores already"
        if args.beam_size is not None and args.nbest > args.beam_size:
            return f"--nbest {args.nbest} asks for more translations than --beam-size {args.beam_size} keeps"
        if args.model_dir is not None and args.beam_size is None and args.nbest > DecodingConfig.beam_size:
            default = DecodingConfig.beam_size
            return f"--nbest {args.nbest} asks for more translations than the default --beam-size {default}"
        flag = export_setting_given(args)
        if flag:
            return (
                f"{flag} cannot apply with --nbest to a SavedModel: its nbest signature decodes with "
                "the settings it was exported with (use --model-dir, or leave out the flag)"
            )
    return None


def export_setting_given(args):
    """The first of --alpha and --max-extra-length given with a SavedModel, or None: the
    flags that only `translate_with_options` and `constrained` take, which the nbest and
    align signatures fix at export."""
    if args.model_dir is not None:
        return None
    given = (("--alpha", args.alpha), ("--max-extra-length", args.max_extra_length))
    return next((flag for flag, value in given if value is not None), None)


def steering_conflict(args):
    """What keeps the steering flags given from applying, or None: the constrained
    signature runs beam search at the export's beam size and gives the best translation."""
    steering = SteeringFlags.of(args).given()
    if not steering:
        return None
    flags = " and ".join(steering)
    if sampling_on(args):
        return f"{flags} steer beam search, not sampling (--sampling-topk/-topp/-temperature)"
    if args.nbest is not None:
        return f"--nbest: {flags} give the best translation of each line only (the constrained signature's)"
    if args.beam_size == 1:
        return f"--beam-size 1 (greedy) cannot be steered by {flags}: they steer beam search (give a larger beam)"
    return None


def align_flags(args):
    """The flags given that decode through the align signature, as on the command line ([]:
    none); `args` parsed flags, or a `TranslatePlan`."""
    given = [("--alignments", args.alignments), ("--markup", args.markup), ("--document", args.document)]
    return [flag for flag, value in given if value]


def align_conflict(args):
    """What keeps --alignments, --markup and --document from applying, or None: the align
    signature runs beam search, unsteered, with the export's settings, and gives the best
    translation."""
    given = align_flags(args)
    if not given:
        return None
    flags = " and ".join(given)
    if sampling_on(args):
        return (
            f"sampling (--sampling-topk/-topp/-temperature) cannot apply with {flags}: the align signature runs "
            "beam search"
        )
    if args.nbest is not None:
        return f"--nbest cannot apply with {flags}: the align signature gives the best translation of each line only"
    steering = SteeringFlags.of(args).given()
    if steering:
        return f"{' and '.join(steering)} cannot apply with {flags}: the align signature does not steer its search"
    if args.beam_size == 1:
        return f"--beam-size 1 (greedy) cannot apply with {flags}: the align signature runs beam search"
    setting = export_setting_given(args)
    if setting:
        return (
            f"{setting} cannot apply with {flags} to a SavedModel: its align signature decodes with the "
            "settings it was exported with (use --model-dir, or leave out the flag)"
        )
    if args.document and args.scores:
        return "--scores cannot apply with --document: each sentence of a paragraph has its own score"
    return None


# Reading and writing.


def read_lines(path):
    """The lines of `path` (STDIN: standard input) as UTF-8 text, without their line breaks."""
    if path == STDIN:
        data, name = sys.stdin.buffer.read(), "standard input"
    else:
        with open(path, "rb") as f:
            data, name = f.read(), path
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{name} is not UTF-8 text (line {line}: {error.reason})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line break ends the last line; it does not start one
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def format_output(results, nbest=None, scores=False):
    """The output text for `results` (one list of `(translation, score)` per input line,
    best first; [] for a line not decoded, written empty; a score of None for a line
    written as it was, without its score), in the format the flags choose."""
    rows = []
    for number, hypotheses in enumerate(results, start=1):
        if nbest:
            rows += [
                f"{number}\t{rank}\t{score:.{DECIMALS}f}\t{_one_line(text)}"
                for rank, (text, score) in enumerate(hypotheses[:nbest], start=1)
            ]
        elif not hypotheses:
            rows.append("")
        elif scores and hypotheses[0][1] is not None:  # None: kept as it was, not translated
            rows.append(f"{hypotheses[0][1]:.{DECIMALS}f}\t{_one_line(hypotheses[0][0])}")
        else:
            rows.append(_one_line(hypotheses[0][0]))
    return "".join(row + "\n" for row in rows)


def _one_line(text):
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def translate_lines(decode, lines, batch_size, progress=None):
    """One list of `(translation, score)` per line, in input order; [] for a blank line.

    `decode(sentences, line_numbers)` takes a batch and returns one list per sentence.
    Lines are decoded sorted by length, so a batch pads little; `progress(done)`, the
    count of lines decoded, is called after each batch.
    """
    todo = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]

    def decode_batch(batch):
        return decode([line for _, line in batch], [number for number, _ in batch])

    results = [[] for _ in lines]
    decoded = in_length_order(decode_batch, todo, batch_size, progress, length=lambda pair: len(pair[1]))
    for (number, _), hypotheses in zip(todo, decoded):
        results[number - 1] = hypotheses
    return results


# The model.


@dataclasses.dataclass
class SteeredLines:
    """What steers each input line (`read_steering`), and the lines whose translation
    could not hold every constraint, filled in as they are decoded."""

    steering: list  # one SentenceSteering per input line
    unmet: list = dataclasses.field(default_factory=list)  # line numbers, from 1

    def inputs(self, line_numbers):
        """The constrained signature's steering inputs for these lines (numbers from 1)."""
        import tensorflow as tf

        chosen = [self.steering[number - 1] for number in line_numbers]
        return dict(
            prefixes=tf.constant([line.prefix for line in chosen], tf.string),
            constraints=tf.constant([line.constraints for line in chosen], tf.string),
            no_repeat_ngram_size=tf.constant([line.no_repeat_ngram_size for line in chosen], tf.int32),
        )

    def record(self, line_numbers, met):
        """Notes the lines whose `met` (bool `[B]`, the signature's constraints_met) is false."""
        self.unmet += [number for number, ok in zip(line_numbers, met) if not ok]

    def warnings(self):
        """One line for standard error per line whose constraints were not all met."""
        return [
            f"warning: line {number}: no translation within the length limit holds every constraint; "
            "the best one found is written" for number in sorted(self.unmet)
        ]


def make_decoder(plan, steered=None):
    """`(decode, description)`: loads the model. `decode(sentences, line_numbers)` returns, per
    sentence, its hypotheses `[(translation, score)]`, best first (one unless --nbest).
    With `steered` (a `SteeredLines`, given where `plan.steering` is), through the
    constrained signature, each line steered as `steered` says.

    Raises:
        FlagError: a flag the SavedModel cannot apply (its beam size is another; it has
            no constrained signature).
    """
    if plan.model.model_dir:
        return _model_dir_decoder(plan, steered), plan.model.path
    return _saved_model_decoder(plan, steered), plan.model.path


def _constrained_decoder(constrained, steered, alpha, max_extra_length):
    """`decode` through `constrained` (the signature, or `Translator.serve_constrained`):
    one translation per sentence, its lines' unmet constraints recorded in `steered`."""
    import tensorflow as tf

    def decode(sentences, line_numbers):
        n = len(sentences)
        outputs = constrained(
            inputs=tf.constant(sentences), **steered.inputs(line_numbers),
            alpha=tf.fill([n], float(alpha)), max_extra_length=tf.fill([n], int(max_extra_length)),
        )
        steered.record(line_numbers, outputs["constraints_met"].numpy())
        return _hypotheses(outputs)

    return decode


def _sampling_inputs(sampling, sentences, line_numbers, max_extra_length):
    import tensorflow as tf

    n = len(sentences)
    return dict(
        inputs=tf.constant(sentences),
        seed=tf.constant([sampling.sentence_seed(number) for number in line_numbers], tf.int64),
        top_k=tf.fill([n], sampling.top_k),
        top_p=tf.fill([n], float(sampling.top_p)),
        temperature=tf.fill([n], float(sampling.temperature)),
        max_extra_length=tf.fill([n], int(max_extra_length)),
    )


def _hypotheses(outputs, count=1):
    """Per sentence, `[(translation, score)]` of the first `count` columns of a signature's
    outputs (`[B]` or `[B, K]`)."""
    texts, scores = outputs["translations"].numpy(), outputs["scores"].numpy()
    if texts.ndim == 1:
        texts, scores = texts[:, None], scores[:, None]
    return [
        # A sampled sequence of byte pieces may not be UTF-8.
        [(text.decode("utf-8", "replace"), float(score)) for text, score in zip(row_texts[:count], row_scores[:count])]
        for row_texts, row_scores in zip(texts, scores)
    ]


def _model_dir_decoder(plan, steered):
    import tensorflow as tf

    translator, _ = plan.model.load_translator(plan.decoding)
    if steered is not None:  # at the plan's beam size, alpha and extra length
        d = plan.decoding

        # Not the bound tf.function itself: it holds the translator weakly, and the
        # translator must live as long as `decode`.
        def constrained(**inputs):
            return translator.serve_constrained(**inputs)

        return _constrained_decoder(constrained, steered, d.alpha, d.max_extra_length)
    if plan.sampling:

        def decode(sentences, line_numbers):
            inputs = _sampling_inputs(plan.sampling, sentences, line_numbers, plan.decoding.max_extra_length)
            return _hypotheses(translator.serve_sample(**inputs))

    else:

        def decode(sentences, line_numbers):
            return _hypotheses(translator.serve_nbest(tf.constant(sentences)), plan.nbest or 1)

    return decode


def exported_beam_size(loaded):
    """The beam size a loaded SavedModel was exported with: its nbest signature's K."""
    return loaded.signatures["nbest"].structured_outputs["translations"].shape[1]


def _saved_model_decoder(plan, steered):
    import tensorflow as tf

    from app.export.export_info import exported_decoding

    saved_model = plan.model.saved_model
    exported = exported_decoding(saved_model)
    loaded = plan.model.load_saved_model()
    signatures = loaded.signatures
    asked = plan.overrides
    max_extra_length = exported.max_extra_length if asked.max_extra_length is None else asked.max_extra_length
    if plan.sampling:
        if "sample" not in signatures:
            raise FlagError(
                f"{saved_model} was exported before sampling existed (no sample signature); export "
                "it again, or give --model-dir"
            )
        sample = signatures["sample"]

        def decode(sentences, line_numbers):
            return _hypotheses(sample(**_sampling_inputs(plan.sampling, sentences, line_numbers, max_extra_length)))

        return decode

    beam_size = checked_beam_size(plan, loaded)
    if plan.nbest is not None and plan.nbest > beam_size:
        raise FlagError(
            f"--nbest {plan.nbest} asks for more translations than the beam size {saved_model} "
            f"was exported with ({beam_size})"
        )
    if steered is not None:
        return _saved_model_constrained(plan, loaded, exported, steered)
    options = asked.alpha is not None or asked.max_extra_length is not None
    if asked.beam_size == 1 and beam_size != 1:
        if options:
            raise FlagError(
                "--alpha and --max-extra-length cannot apply with --beam-size 1 to a SavedModel: its greedy "
                "signature decodes with the settings it was exported with (or give --model-dir)"
            )
        greedy = signatures["greedy"]
        return lambda sentences, numbers: _hypotheses(greedy(inputs=tf.constant(sentences)))
    if options:
        alpha = _saved_model_alpha(plan, loaded, exported, "--max-extra-length", "translate_with_options")
        options_signature = signatures["translate_with_options"]

        def decode(sentences, line_numbers):
            n = len(sentences)
            outputs = options_signature(
                inputs=tf.constant(sentences),
                alpha=tf.fill([n], float(alpha)),
                max_extra_length=tf.fill([n], int(max_extra_length)),
            )
            return _hypotheses(outputs)

        return decode
    nbest = signatures["nbest"]
    return lambda sentences, numbers: _hypotheses(nbest(inputs=tf.constant(sentences)), plan.nbest or 1)


def checked_beam_size(plan, loaded):
    """The beam size of the loaded SavedModel of `plan`, which --beam-size must be where given
    (or 1, its greedy signature): a FlagError naming both otherwise."""
    beam_size, asked = exported_beam_size(loaded), plan.overrides.beam_size
    if asked not in (None, beam_size, 1):
        raise FlagError(
            f"--beam-size {asked}: {plan.model.saved_model} was exported with beam size {beam_size}; give "
            f"--beam-size {beam_size} or 1 (greedy), export again with --beam-size {asked}, or give --model-dir"
        )
    return beam_size


def _saved_model_alpha(plan, loaded, exported, flags, signature):
    """The alpha a SavedModel's signature that takes one decodes with: `--alpha`, or the
    export's own (its export_info.json), checked against the model's positions. A FlagError
    naming `flags` where neither is known."""
    import tensorflow as tf

    from app.decoding.model_search import checked_alpha
    from app.export.export_info import EXPORT_INFO

    alpha = plan.overrides.alpha if plan.overrides.alpha is not None else exported.alpha
    if alpha is None:
        raise FlagError(
            f"{flags}: {plan.model.saved_model}'s {EXPORT_INFO} does not record the alpha it was exported with, "
            f"which {signature} needs; give --alpha"
        )
    checked_alpha(alpha, int(loaded.source_lengths(tf.constant([], tf.string))["limit"]))
    return alpha


def _saved_model_constrained(plan, loaded, exported, steered):
    """`decode` through the SavedModel's constrained signature, at the alpha and extra
    length asked for, or the export's own (its export_info.json)."""
    saved_model, asked = plan.model.saved_model, plan.overrides
    flags = " and ".join(plan.steering.given())
    if "constrained" not in loaded.signatures:
        raise FlagError(
            f"{flags}: {saved_model} was exported before steering existed (no constrained signature); "
            "export it again, or give --model-dir"
        )
    alpha = _saved_model_alpha(plan, loaded, exported, flags, "the constrained signature")
    max_extra_length = exported.max_extra_length if asked.max_extra_length is None else asked.max_extra_length
    return _constrained_decoder(loaded.signatures["constrained"], steered, alpha, max_extra_length)


# Through the align signature: --alignments, --markup, --document.


def make_aligner(plan):
    """`align(sentences) -> [(translation, score, pharaoh)]`, one batch through the export's
    `align` signature (with --model-dir, `Translator.serve_align` in memory, decoding as the
    plan says): the best translation, its score and its Pharaoh line. Loads the model.

    Raises:
        FlagError: a SavedModel without the align signature, or exported with another beam
            size than --beam-size.
    """
    import tensorflow as tf

    if plan.model.model_dir:
        translator, _ = plan.model.load_translator(plan.decoding)

        # Not the bound tf.function itself: it holds the translator weakly.
        def align(sentences):
            return _aligned(translator.serve_align(tf.constant(sentences)))

        return align
    loaded = plan.model.load_saved_model()
    checked_beam_size(plan, loaded)
    if "align" not in loaded.signatures:
        raise FlagError(
            f"{' and '.join(align_flags(plan))}: {plan.model.saved_model} was exported before word alignments "
            "existed (no align signature); export it again, or give --model-dir"
        )
    signature = loaded.signatures["align"]
    return lambda sentences: _aligned(signature(inputs=tf.constant(sentences)))


def _aligned(outputs):
    """`[(translation, score, pharaoh)]` of the align signature's outputs."""
    texts, scores, alignments = (outputs[name].numpy() for name in ("translations", "scores", "alignments"))
    return [
        (text.decode("utf-8", "replace"), float(score), pharaoh.decode("utf-8"))
        for text, score, pharaoh in zip(texts, scores, alignments)
    ]


def source_language(model):
    """The language a model translates from, as its sentences are split (--document): the
    export's export_info.json `source_lang`, or the run's data configuration; None where an
    export does not record it."""
    if model.model_dir:
        from app.model_dir.settings import load_settings

        return load_settings(model.model_dir)[1].source_lang
    from app.export.export_info import read_export_info

    return read_export_info(model.saved_model).get("source_lang")


def checked_markup(plan, lines):
    """Every line of markup (every paragraph, with --document) read before the model loads:
    `[Stripped]`, one per line (data/markup.py); None without --markup or with --document,
    whose paragraphs `data.documents.translate_blocks` strips again.

    Raises:
        MarkupError: naming the line and the column of the first malformed markup.
    """
    if not plan.markup:
        return None
    if plan.document:
        for block in read_blocks(lines):
            if isinstance(block, Paragraph):
                strip(block.text, first_line=block.first_line)
        return None
    return [strip(line, first_line=number) for number, line in enumerate(lines, start=1)]


class Aligner:
    """The `align(sentences) -> [(translation, pharaoh)]` of data/markup.py and data/documents.py
    over `make_aligner`'s: the sentences decoded in batches of similar length, as
    `translate_lines` decodes lines, each answer kept with its score in `answered`.

    Args:
        align: `make_aligner`'s function, one batch.
        batch_size: sentences a batch.
        progress: `progress(total) -> (update, close)` for the sentences of a call, or None.
    """

    def __init__(self, align, batch_size, progress=None):
        self.align, self.batch_size, self.progress = align, batch_size, progress
        self.answered = []  # (sentence, translation, score, pharaoh), in the order asked

    def __call__(self, sentences):
        update, close = self.progress(len(sentences)) if self.progress else (None, None)
        answers = in_length_order(self.align, list(sentences), self.batch_size, update)
        if close:
            close()
        self.answered += [(sentence, *answer) for sentence, answer in zip(sentences, answers)]
        return [(translation, pharaoh) for translation, _, pharaoh in answers]


def translate_aligned(plan, lines, aligner, *, language=None, stripped=None):
    """`(results, pharaohs)`, one of each per output line: the hypotheses `[(text, score)]`
    as `format_output` takes them ([] for a line not translated; a score of None for a line
    kept as it was, markup without words, or a paragraph) and the Pharaoh line ("" for none).

    Args:
        lines: the input's lines.
        aligner: an `Aligner`.
        language: the source language, with --document (`source_language`).
        stripped: `checked_markup`'s lines, with --markup and without --document.
    """
    if plan.document:
        blocks = read_blocks(lines)
        paragraphs = translate_blocks(blocks, language, aligner, plan.markup)
        texts = write_blocks(blocks, [text for text, _ in paragraphs])
        pharaohs = write_blocks(blocks, [pharaoh for _, pharaoh in paragraphs])
        return [[(text, None)] if isinstance(block, Paragraph) else [] for block, text in zip(blocks, texts)], pharaohs
    if plan.markup:
        outputs = translate_markup(lines, aligner)
        sent = [bool(item.words) for item in stripped]  # what translate_markup sends: the texts with words
    else:
        sent = [bool(line.strip()) for line in lines]  # blank lines are not decoded, as in translate_lines
        aligner([line for line, sending in zip(lines, sent) if sending])
        outputs = lines  # each line sent becomes its translation below
    answers = iter(aligner.answered)
    results, pharaohs = [], []
    for line, output, sending in zip(lines, outputs, sent):
        if not sending:  # blank, or markup without words: kept as it is
            results.append([(output, None)] if line.strip() else [])
            pharaohs.append("")
            continue
        _, translation, score, pharaoh = next(answers)
        results.append([(output if plan.markup else translation, score)])
        pharaohs.append(pharaoh)
    return results, pharaohs


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        plan = plan_translation(args)
    except FlagError as error:
        parser.error(str(error))
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    plan.threads.apply()  # before TensorFlow runs an op: its pools are made then
    from app.runtime.progress import CountProgress  # (imports Keras)
    from app.export.saved_model import ExportError
    from data.errors import DataError

    input_name = "standard input" if plan.input == STDIN else f"--input {plan.input}"
    try:
        lines = read_lines(plan.input)
        steered = stripped = language = None
        if plan.steering:  # every file read and checked against the input before the model loads
            from app.decoding.constrained_beam_search import MAX_PHRASES

            steered = SteeredLines(read_steering(plan.steering, lines, input_name, MAX_PHRASES))
        if plan.aligned:
            stripped = checked_markup(plan, lines)  # before the model loads, too
            language = source_language(plan.model) if plan.document else None
            align = make_aligner(plan)
        else:
            decode, _ = make_decoder(plan, steered)
    except FlagError as error:
        parser.error(str(error))
    except MarkupError as error:
        print(f"error: {input_name}: {error}", file=sys.stderr)
        return 1
    except (DataError, ExportError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if plan.aligned:
        return write_aligned(plan, lines, align, language=language, stripped=stripped)
    # On a terminal only: in a log, lines of progress would be noise beside the translations.
    progress = None
    if sys.stderr.isatty():
        progress = CountProgress("translating", sum(1 for line in lines if line.strip()), "lines")
    results = translate_lines(decode, lines, plan.batch_size, progress and progress.update)
    if progress:
        progress.close()
    for warning in steered.warnings() if steered else []:
        print(warning, file=sys.stderr)
    return write_output(plan.output, format_output(results, plan.nbest, plan.scores))


def write_aligned(plan, lines, align, *, language=None, stripped=None):
    """Translates `lines` through `align` (`make_aligner`'s) and writes the output and the
    --alignments file, each whole, the alignments first; the exit status (`write_output`'s).
    `language` and `stripped` as `translate_aligned` takes them (None: unknown, English's rules)."""
    if plan.document and language is None:
        print(f"note: {plan.model.path} does not record its source language (export_info.json); sentences are "
              f"split by the rules of {FALLBACK_LANGUAGE!r}", file=sys.stderr)
    # On a terminal only: in a log, lines of progress would be noise beside the translations.
    aligner = Aligner(align, plan.batch_size, _sentence_progress if sys.stderr.isatty() else None)
    results, pharaohs = translate_aligned(plan, lines, aligner, language=language or FALLBACK_LANGUAGE,
                                          stripped=stripped)
    if plan.alignments and write_output(plan.alignments, "".join(line + "\n" for line in pharaohs), "--alignments"):
        return 1
    return write_output(plan.output, format_output(results, scores=plan.scores))


def _sentence_progress(total):
    """`(update, close)` of a progress line for `total` sentences."""
    from app.runtime.progress import CountProgress

    progress = CountProgress("translating", total, "sentences")
    return progress.update, progress.close


if __name__ == "__main__":
    sys.exit(main())
