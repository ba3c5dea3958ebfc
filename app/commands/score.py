"""Scores given translations with a model: each pair's log-probability, by forced decoding.

    python -m app.score --source test.en --target test.de       # saved_models/translator, its newest version
    python -m app.score --saved-model saved_models/translator/2 --source test.en --target test.de
    python -m app.score --model-dir runs/tiny-multi30k-en-de --source test.en --target hyp.de --output scores.tsv
    python -m app.translate --input test.en | python -m app.score --source test.en --target -

As `onmt-main score` and `fairseq-generate --score-reference` do: the model reads each
source line and is fed its target line token by token (teacher forcing); each target
token's log-probability is read off one forward pass (app/decoding/forced.py). The
export's `score` signature does the same in the graph, so `--saved-model` and
`--model-dir` give the same numbers.

Output: one line per pair, in the order of the files, tab-separated (TSV, no header):

    total log-prob <TAB> tokens <TAB> per-token log-probs, space-separated [<TAB> mean]
    -7.512345	5	-2.103456 -0.712345 -3.001234 -1.456789 -0.238521

Natural logarithms, six decimals, no length penalty and no label smoothing. `tokens`
counts the target's subwords and its end token, every one scored; the per-token list
holds that many values, the end token's last. `--normalize` adds a fourth column, the
mean (total / tokens). An empty line is scored like any other: an empty target is its
end token alone.

Longer than the model's positions: the source is cut as for translation (its first
max_length - 1 subwords, then the end token) and the target is scored on its first
max_length tokens (their log-probs are those of the whole target; the rest and the end
token are not scored, and `tokens` says how many were). Such lines are named on stderr.
"""

import argparse
import dataclasses
import sys
from typing import Optional

from app.cli.flag_types import FlagError, positive_int
from app.cli.flags import cpu_threads_from_args, add_thread_arguments
from app.cli.model_source import add_model_source_arguments, model_source_from_args
from app.cli.output_file import STDIN, output_file_problem, write_output
from app.evaluation.in_order import in_length_order
from app.runtime.threads import CpuThreads
from app.export.model_source import ModelSource

# Digits after the point in every number of the output.
DECIMALS = 6


def parse_args(argv=None):
    """`(parser, flags)`: exits 2 naming a flag argparse refuses."""
    parser = argparse.ArgumentParser(
        prog="python -m app.score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_source_arguments(parser)
    parser.add_argument("--source", required=True, metavar="FILE", help="the source sentences, one per line")
    parser.add_argument(
        "--target", required=True, metavar="FILE", help="their translations, line by line; - reads standard input"
    )
    parser.add_argument("--output", metavar="FILE", help="write the scores here (default: standard output)")
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="pairs per forward pass (default 64)"
    )
    parser.add_argument(
        "--normalize", action="store_true",
        help="add a fourth column: the mean log-prob per token (default: three columns)",
    )
    add_thread_arguments(parser.add_argument_group("CPU threads"))
    return parser, parser.parse_args(argv)


@dataclasses.dataclass(frozen=True)
class ScorePlan:
    """One scoring run, as its flags describe it (`plan_scoring`)."""

    # The model: one SavedModel version (--saved-model, its base's newest version;
    # saved_models/translator by default), or a training run (--model-dir, with
    # --checkpoint and --average-last).
    model: ModelSource
    # The pairs scored: line n of --source with line n of --target (STDIN: standard input).
    source: str
    target: str
    # Where the scores go (--output; None: standard output).
    output: Optional[str]
    # Pairs per forward pass (--batch-size); a fourth column, the mean (--normalize).
    batch_size: int
    normalize: bool
    # TensorFlow's CPU thread pools (--intra-op-threads, --inter-op-threads).
    threads: CpuThreads


def plan_scoring(args):
    """The `ScorePlan` of parsed app.score flags `args` (left as they are), checked before
    TensorFlow is imported, so that a slip costs well under a second. Reads the disk: the
    newest SavedModel version, and whether the files can be read and written.

    Raises:
        FlagError: naming the flag whose value cannot be used.
    """
    from data.errors import DataError
    from data.text_files import check_readable

    model = model_source_from_args(args)
    if args.source == STDIN and args.target == STDIN:
        raise FlagError("--source and --target cannot both read standard input (-)")
    for flag, path in (("--source", args.source), ("--target", args.target)):
        if path != STDIN:
            try:
                check_readable(path)
            except DataError as error:
                raise FlagError(f"{flag}: {error}") from None
    problem = args.output and output_file_problem(
        args.output, {"--source": args.source, "--target": args.target}, "the scores"
    )
    if problem:
        raise FlagError(problem)
    return ScorePlan(
        model=model,
        source=args.source,
        target=args.target,
        output=args.output,
        batch_size=args.batch_size,
        normalize=args.normalize,
        threads=cpu_threads_from_args(args),
    )


def read_pairs(source_path, target_path, stdin=None):
    """`(sources, targets)`, the two files' lines (`-` reads `stdin`, default sys.stdin).

    Raises:
        DataError: a file cannot be read or is not UTF-8 text, or the two have different
            line counts (the message names both files and counts their lines).
    """
    from data.errors import DataError
    from data.text_files import read_lines

    def lines(path):
        if path != STDIN:
            return read_lines(path)
        data = (stdin or sys.stdin).buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(
                f"standard input: not valid UTF-8 (byte 0x{data[error.start]:02x} at byte offset {error.start})"
            ) from None
        # As read_lines: only "\n" ends a line, and a "\r" before it is dropped.
        lines = text.removeprefix("\ufeff").split("\n")
        if lines[-1] == "":
            lines.pop()  # the last line's "\n" ends it; it does not begin another
        return [line.removesuffix("\r") for line in lines]

    sources, targets = lines(source_path), lines(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"--source {describe(source_path)} has {len(sources)} lines but --target {describe(target_path)} "
            f"has {len(targets)}; line N of one must translate line N of the other"
        )
    return sources, targets


def describe(path):
    return "- (standard input)" if path == STDIN else path


def make_score_fn(plan):
    """`(score, weights)`: loads the model (the slow part).

    score: `(sources, targets)`, lists of strings -> the `score` signature's outputs as
    NumPy arrays: log_prob float32 [B], token_log_probs float32 [B, T], target_lengths
    int32 [B], truncated bool [B].
    """
    import tensorflow as tf

    from app.export.saved_model import ExportError

    if plan.model.saved_model:
        loaded = plan.model.load_saved_model()
        if "score" not in loaded.signatures:
            raise ExportError(
                f"{plan.model.saved_model} has no score signature (it was exported before there was one): "
                "export the run again with python export.py, or score with --model-dir"
            )
        signature = loaded.signatures["score"]

        def score(sources, targets):
            outputs = signature(inputs=tf.constant(sources, tf.string), targets=tf.constant(targets, tf.string))
            return {name: value.numpy() for name, value in outputs.items()}

        return score, plan.model.saved_model

    translator, weights = plan.model.load_translator()

    def score(sources, targets):
        outputs = translator.serve_score(tf.constant(sources, tf.string), tf.constant(targets, tf.string))
        return {name: value.numpy() for name, value in outputs.items()}

    return score, weights


def score_all(score, sources, targets, batch_size, progress=None):
    """Every pair scored, in batches of similar lengths; results in input order.

    `progress`: called with the count of pairs scored after each batch.

    Returns:
        a list of `(log_prob float, token_log_probs list of floats, truncated bool)`.
    """
    def score_batch(pairs):
        outputs = score([source for source, _ in pairs], [target for _, target in pairs])
        rows = zip(outputs["log_prob"], outputs["token_log_probs"], outputs["target_lengths"], outputs["truncated"])
        return [
            (float(log_prob), [float(value) for value in values[: int(length)]], bool(truncated))
            for log_prob, values, length, truncated in rows
        ]

    # Similar lengths share a batch, so little of it is padding.
    pairs = list(zip(sources, targets))
    return in_length_order(score_batch, pairs, batch_size, progress, length=lambda pair: len(pair[0]) + len(pair[1]))


def format_line(log_prob, token_log_probs, normalize=False):
    """One output line (no newline): total, tokens, per-token log-probs [, mean], tab-separated."""
    columns = [f"{log_prob:.{DECIMALS}f}", str(len(token_log_probs))]
    columns.append(" ".join(f"{value:.{DECIMALS}f}" for value in token_log_probs))
    if normalize:
        columns.append(f"{log_prob / len(token_log_probs):.{DECIMALS}f}")
    return "\t".join(columns)


def describe_truncated(line_numbers, shown=10):
    """The stderr warning naming the pairs cut to fit the model's positions."""
    listed = ", ".join(map(str, line_numbers[:shown])) + (", ..." if len(line_numbers) > shown else "")
    return (
        f"warning: {len(line_numbers)} pair(s) longer than the model's positions were scored cut to fit "
        f"(lines {listed}): the source as for translation, the target on its first tokens only "
        "(python -m app.score --help)"
    )


def main(argv=None, stdin=None):
    parser, args = parse_args(argv)
    try:
        plan = plan_scoring(args)
    except FlagError as error:
        parser.error(str(error))
    from data.errors import DataError

    try:
        sources, targets = read_pairs(plan.source, plan.target, stdin)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    from app.export.saved_model import ExportError

    plan.threads.apply()  # before TensorFlow runs an op: its pools are made then

    try:
        score, _ = make_score_fn(plan)
    except (ExportError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    from app.runtime.progress import CountProgress

    if sources:
        score(sources[:1], targets[:1])  # traced once, so the progress line's rate is scoring only
    progress = CountProgress("scoring", len(sources), "pairs")
    results = score_all(score, sources, targets, plan.batch_size, progress.update)
    progress.close()
    truncated = [number for number, (_, _, cut) in enumerate(results, start=1) if cut]
    if truncated:
        print(describe_truncated(truncated), file=sys.stderr)
    text = "".join(format_line(total, values, plan.normalize) + "\n" for total, values, _ in results)
    return write_output(plan.output, text)


if __name__ == "__main__":
    sys.exit(main())
