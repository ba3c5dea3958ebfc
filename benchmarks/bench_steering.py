"""Steered decoding against plain beam search, on one export, in one run: quality and speed.

    python benchmarks/bench_steering.py --saved-model saved_models/translator          # test_2016_flickr
    python benchmarks/bench_steering.py --saved-model seed1 --also seed2=exports/seed2 \\
        --also "ensemble of 2=exports/ens2" --also "ensemble of 4=exports/ens4"
    python benchmarks/bench_steering.py --saved-model DIR --sentences 100 --rounds 1       # a quick look

The export's `serving_default` (beam search) is the reference. Beside it, the same sentences
go through its `constrained` signature (app/export/saved_model.py) with:

- nothing set: what steering costs a request that uses none of it;
- one and two constraints a sentence, taken from the reference as Post & Vilar (2018) do
  for simulated post-editing: phrases of one to three words of the reference that the
  unconstrained translation lacks (a translator's corrections), drawn at random
  (`--seed`), the two of a sentence not overlapping; a sentence whose translation already
  holds every such phrase gets none, and counts among "sentences with constraints" only
  where it has some;
- a prefix: the reference's first two words, as an interactive translator types them;
- `no_repeat_ngram_size` 3;
- each `--also NAME=PATH`: another export's `serving_default` (another seed, an ensemble
  made by `python export.py --ensemble`), all on the same sentences.

Printed per configuration: sacreBLEU lowercased and BLEU on Multi30k's lc.norm.tok form
(app/evaluation/metrics.py), the share of constrained sentences whose every phrase
appears (as `constraints_met` says, and as found in the output text, compared as the
tokenizer spells the phrase), sentences per second at batch `--batch-size`, and the
speed over plain beam search's: the median over `--rounds` rounds, with the lowest and
highest. One process, TensorFlow with one thread per op and `--threads` ops at once (the
serving setting); the configurations take turns chunk by chunk (`--chunk-sentences`), so
that a shared machine's drift from minute to minute falls on all of them alike.
"""

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from benchmarks import machine  # noqa: E402
from app.cli.flag_types import positive_int  # noqa: E402
from data.corpora import MULTI30K_SCORED_SPLITS, read_multi30k_lines  # noqa: E402

# Constraint phrases are one to this many words of the reference.
LONGEST_PHRASE_WORDS = 3
# Words of the reference that form the prefix.
PREFIX_WORDS = 2
NO_REPEAT_NGRAM_SIZE = 3
BASELINE = "beam search"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saved-model", required=True, help="the export: a version or its base (newest version)")
    parser.add_argument(
        "--also", action="append", default=[], metavar="NAME=PATH",
        help="another export whose serving_default is measured beside it (repeatable; default: none)",
    )
    parser.add_argument(
        "--split", default="test_2016_flickr", choices=MULTI30K_SCORED_SPLITS,
        help="the bundled Multi30k split (default test_2016_flickr)",
    )
    parser.add_argument("--sentences", type=positive_int, help="the first N sentences only (default: all)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="sentences a call (default 32)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="timed rounds (default 3)")
    parser.add_argument(
        "--chunk-sentences", type=positive_int, default=128,
        help="sentences each configuration translates before the next takes its turn (default 128)",
    )
    parser.add_argument("--threads", type=positive_int, default=2, help="TensorFlow's ops at once (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="the draw of constraint phrases (default 1)")
    args = parser.parse_args(argv)
    for entry in args.also:
        if "=" not in entry or not entry.split("=", 1)[0] or not entry.split("=", 1)[1]:
            parser.error(f"--also {entry!r}: give NAME=PATH")
    return args


def _words(text):
    """The words of `text` with the punctuation at their edges taken off; empty ones dropped."""
    stripped = (word.strip(".,;:!?\"'()„“”‚‘’«»-–—") for word in text.split())
    return [word for word in stripped if word]


def reference_phrases(reference, translation, count, rng):
    """Up to `count` non-overlapping phrases of one to `LONGEST_PHRASE_WORDS` words of
    `reference` that `translation` lacks (compared lowercased), drawn with `rng`."""
    words = _words(reference)
    lacking = translation.lower()
    spans = [
        (start, start + length)
        for length in range(1, LONGEST_PHRASE_WORDS + 1)
        for start in range(len(words) - length + 1)
        if " ".join(words[start : start + length]).lower() not in lacking
    ]
    rng.shuffle(spans)
    chosen = []
    for start, end in spans:
        if len(chosen) == count:
            break
        if all(end <= other_start or start >= other_end for other_start, other_end in chosen):
            chosen.append((start, end))
    return [" ".join(words[start:end]) for start, end in sorted(chosen)]


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModels' tokenizer ops)

    from app.evaluation.metrics import lc_norm_tok_bleu
    from app.export.export_info import exported_decoding, read_export_info
    from app.export.locate import saved_model_version

    import sacrebleu

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    path = saved_model_version(args.saved_model)
    info = read_export_info(path)
    decoding = exported_decoding(path)
    alpha = decoding.alpha if decoding.alpha is not None else 0.6
    target_lang = info.get("target_lang", "de")
    sources, references = (
        read_multi30k_lines(args.split, lang, args.sentences) for lang in (info.get("source_lang", "en"), target_lang)
    )
    loaded = {}

    def signatures_of(version):
        """The version's signatures, each export loaded once however often it is named."""
        key = os.path.realpath(version)
        if key not in loaded:
            loaded[key] = tf.saved_model.load(version).signatures
        return loaded[key]

    signatures = signatures_of(path)
    if "constrained" not in signatures:
        raise SystemExit(f"{path} has no constrained signature: export it again with this version of export.py")
    others = {}
    for entry in args.also:
        name, other = entry.split("=", 1)
        others[name] = signatures_of(saved_model_version(other))["serving_default"]

    def plain(signature):
        def translate(batch):
            outputs = signature(inputs=tf.constant([sources[i] for i in batch]))
            return [text.decode("utf-8") for text in outputs["translations"].numpy()], None

        return translate

    def steered(prefixes=None, constraints=None, no_repeat=0):
        def translate(batch):
            n = len(batch)
            outputs = signatures["constrained"](
                inputs=tf.constant([sources[i] for i in batch]),
                prefixes=tf.constant([prefixes[i] if prefixes else "" for i in batch]),
                constraints=tf.constant(["\t".join(constraints[i]) if constraints else "" for i in batch]),
                no_repeat_ngram_size=tf.fill([n], no_repeat), alpha=tf.fill([n], float(alpha)),
                max_extra_length=tf.fill([n], decoding.max_extra_length),
            )
            texts = [text.decode("utf-8") for text in outputs["translations"].numpy()]
            return texts, outputs["constraints_met"].numpy().tolist()

        return translate

    def batched(translate, indices):
        texts, met = [], []
        for start in range(0, len(indices), args.batch_size):
            batch_texts, batch_met = translate(indices[start : start + args.batch_size])
            texts += batch_texts
            met += batch_met or [True] * len(batch_texts)
        return texts, met

    everything = list(range(len(sources)))
    baseline_texts, _ = batched(plain(signatures["serving_default"]), everything)  # also the warm-up
    rng = random.Random(args.seed)
    one = [reference_phrases(ref, out, 1, rng) for ref, out in zip(references, baseline_texts)]
    two = [reference_phrases(ref, out, 2, rng) for ref, out in zip(references, baseline_texts)]
    prefixes = [" ".join(reference.split()[:PREFIX_WORDS]) for reference in references]
    configurations = {
        BASELINE: (plain(signatures["serving_default"]), None),
        "constrained, nothing set": (steered(), None),
        "1 constraint": (steered(constraints=one), one),
        "2 constraints": (steered(constraints=two), two),
        f"prefix: reference's first {PREFIX_WORDS} words": (steered(prefixes=prefixes), None),
        f"no_repeat_ngram_size {NO_REPEAT_NGRAM_SIZE}": (steered(no_repeat=NO_REPEAT_NGRAM_SIZE), None),
        **{name: (plain(signature), None) for name, signature in others.items()},
    }
    for translate, _ in configurations.values():
        translate(everything[: args.batch_size])  # each signature's first call traces and optimizes

    seconds = {name: [0.0] * args.rounds for name in configurations}
    outputs = {}
    for round_index in range(args.rounds):
        for chunk_start in range(0, len(sources), args.chunk_sentences):
            chunk = everything[chunk_start : chunk_start + args.chunk_sentences]
            for name, (translate, _) in configurations.items():
                started = time.perf_counter()
                texts, met = batched(translate, chunk)
                seconds[name][round_index] += time.perf_counter() - started
                if round_index == 0:
                    outputs.setdefault(name, ([], []))
                    outputs[name][0].extend(texts)
                    outputs[name][1].extend(met)

    lowercase = info.get("lowercase", False)

    def found(phrase, text):
        """Whether `phrase` is in `text` as the tokenizer spells ordinary words: spaces
        collapsed, lowercased for a lowercased model (its NFKC normalization aside)."""
        phrase = " ".join(phrase.split())
        return (phrase.lower() in text.lower()) if lowercase else (phrase in text)

    for line in machine.machine_header([f"TensorFlow {tf.__version__}", f"sacreBLEU {sacrebleu.__version__}"]):
        print(line)
    print(
        f"export {path}: beam {decoding.beam_size}, alpha {alpha}, max length input + {decoding.max_extra_length}; "
        f"{len(sources)} sentences of {args.split}, batch {args.batch_size}, one thread per op, "
        f"{args.threads} ops at once, {args.rounds} rounds"
    )
    print(
        "| configuration | BLEU lc | BLEU lc.norm.tok | constrained sentences: all met (signature / text) "
        "| sentences/s | speed over beam search (lowest-highest) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (_, phrases) in configurations.items():
        texts, met = outputs[name]
        bleu = sacrebleu.corpus_bleu(texts, [references], lowercase=True).score
        lc_norm_tok = lc_norm_tok_bleu(texts, references, target_lang)[0]
        speeds = [len(sources) / s for s in seconds[name]]
        ratios = [b / s for s, b in zip(seconds[name], seconds[BASELINE])]
        met_column = ""
        if phrases is not None:
            constrained = [i for i, sentence_phrases in enumerate(phrases) if sentence_phrases]
            by_signature = sum(met[i] for i in constrained)
            in_text = sum(all(found(p, texts[i]) for p in phrases[i]) for i in constrained)
            share = 100.0 / max(len(constrained), 1)
            met_column = f"{by_signature * share:.1f}% / {in_text * share:.1f}% of {len(constrained)}"
        print(
            f"| {name} | {bleu:.2f} | {lc_norm_tok:.2f} | {met_column} | {statistics.median(speeds):.1f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
