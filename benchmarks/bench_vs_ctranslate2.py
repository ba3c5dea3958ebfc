"""Beam-search translation speed against CTranslate2 on the same weights, one run.

    python benchmarks/bench_vs_ctranslate2.py --model-dir runs/tiny-multi30k-en-de      # test_2016_flickr
    python benchmarks/bench_vs_ctranslate2.py --model-dir DIR --split validation --sentences 200
    python benchmarks/bench_vs_ctranslate2.py --model-dir DIR --file news.en --reference news.de --threads 4,8

The model directory's weights, chosen and averaged as `python export.py` chooses them,
are exported twice into a temporary directory: as the SavedModel (app/export/saved_model.py)
and converted weight for weight into CTranslate2's TransformerSpec
(app/export/ctranslate2.py). The same real sentences (a Multi30k split of the run's
language pair, or `--file`), in their order, are then translated in batches of each
`--batch-sizes` (beam `--beam-size`) by:

- savedmodel: its `serving_default` signature, strings in and out (tokenizer, encoder,
  beam search and detokenizer in the graph), GNMT length penalty `--alpha`;
- ctranslate2-float32 and ctranslate2-int8: `Translator.translate_batch` on the converted
  model (int8: its weights quantized when loaded), with the sentencepiece tokenization
  and detokenization of serving (app/serving/ctranslate2_version.py) inside the timing,
  CTranslate2's own length penalty (log-probability / length ** `--alpha`), and one output
  limit per batch, its longest sentence's (source length + 50, within the model's positions).

Each engine is timed in a process of its own, at each of `--threads` thread counts
(TensorFlow's intra- and inter-op pools; CTranslate2's intra_threads): beside TensorFlow
in one process, CTranslate2's threads ran 3-20x slower, and on a 2-core machine
TensorFlow's decoding ran faster with one thread than with two, so both are timed.
Each figure is the fastest of `--repeats` passes over all sentences after one warm-up
batch. Printed per engine, thread count and batch size: sentences/s, target tokens/s
(the translations' sentencepiece pieces, one end token each), the speed over
CTranslate2 float32's at the same threads and batch size, and the sacreBLEU (and
lowercased BLEU) of the translations against the references.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from app.cli.flag_types import float_at_least, int_list, positive_int  # noqa: E402
from benchmarks import machine  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
ENGINES = ("savedmodel", "ctranslate2-float32", "ctranslate2-int8")
# Multi30k's split names, as data/multi30k/ names its files.
SPLIT_FILES = {"validation": "val", "test_2016_flickr": "test_2016_flickr"}
MAX_EXTRA_LENGTH = 50


def read_sentences(args, source_lang, target_lang):
    """`(sources, references or None)` of `--file`/`--reference` or of the Multi30k split."""
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            sources = [line.rstrip("\n") for line in f]
        references = None
        if args.reference:
            with open(args.reference, encoding="utf-8") as f:
                references = [line.rstrip("\n") for line in f]
            if len(references) != len(sources):
                raise SystemExit(f"--reference has {len(references)} lines, --file {len(sources)}")
    else:
        stem = os.path.join(ROOT, "data", "multi30k", SPLIT_FILES[args.split])
        paths = [f"{stem}.{source_lang}.gz", f"{stem}.{target_lang}.gz"]
        for path in paths:
            if not os.path.exists(path):
                raise SystemExit(f"no {path}: --split reads the bundled Multi30k; give --file for other data")
        sources, references = ([line.rstrip("\n") for line in gzip.open(p, "rt", encoding="utf-8")] for p in paths)
    if args.sentences:
        sources = sources[: args.sentences]
        references = references[: args.sentences] if references else None
    if not sources:
        raise SystemExit("no sentences to translate")
    return sources, references


def batches(items, size):
    return [items[i : i + size] for i in range(0, len(items), size)]


# Workers: one engine, one batch size, in a process of its own.


def savedmodel_worker(path, sentences, batch_size, threads, repeats):
    """`(seconds of the fastest pass, translations)` of the SavedModel's serving_default."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    translate = tf.saved_model.load(path).signatures["serving_default"]

    def one_pass():
        return [
            t.decode("utf-8")
            for batch in batches(sentences, batch_size)
            for t in translate(inputs=tf.constant(batch, tf.string))["translations"].numpy()
        ]

    translate(inputs=tf.constant(sentences[:batch_size], tf.string))  # warm-up: the first call traces
    return fastest(one_pass, repeats)


def ctranslate2_worker(path, sentences, batch_size, threads, repeats, compute_type, beam_size, alpha):
    """`(seconds of the fastest pass, translations)` of CTranslate2's translate_batch."""
    from app.serving.ctranslate2_version import Engine
    from data.special_tokens import END_ID

    if "tensorflow" in sys.modules:  # its thread pools would slow CTranslate2's several times
        raise SystemExit("TensorFlow was imported into the CTranslate2 worker")
    engine = Engine(path, compute_type=compute_type, intra_threads=threads)

    def translate(batch):
        sources = engine.source_pieces(batch)
        limits = engine.output_limits(sources, MAX_EXTRA_LENGTH)
        results = engine.translator.translate_batch(
            sources, beam_size=beam_size, length_penalty=alpha, max_input_length=0,
            max_decoding_length=max(limits), min_decoding_length=0, end_token=engine.pieces[END_ID],
        )
        return [engine.detokenize(result.hypotheses[0]) for result in results]

    def one_pass():
        return [text for batch in batches(sentences, batch_size) for text in translate(batch)]

    translate(sentences[:batch_size])  # warm-up
    return fastest(one_pass, repeats)


def fastest(one_pass, repeats):
    best, output = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        output = one_pass()
        best = min(best, time.perf_counter() - start)
    return best, output


def run_worker(args):
    with open(args.worker_input, encoding="utf-8") as f:
        job = json.load(f)
    if job["engine"] == "savedmodel":
        seconds, translations = savedmodel_worker(
            job["path"], job["sentences"], job["batch_size"], job["threads"], job["repeats"]
        )
    else:
        seconds, translations = ctranslate2_worker(
            job["path"], job["sentences"], job["batch_size"], job["threads"], job["repeats"],
            job["engine"].split("-")[1], job["beam_size"], job["alpha"],
        )
    with open(args.worker_output, "w", encoding="utf-8") as f:
        json.dump({"seconds": seconds, "translations": translations}, f)


def time_engine(engine, path, sentences, batch_size, threads, args, scratch):
    """Runs one worker process with `threads` threads; returns its `{"seconds", "translations"}`."""
    job = os.path.join(scratch, f"job-{engine}-{batch_size}-{threads}.json")
    result = os.path.join(scratch, f"result-{engine}-{batch_size}-{threads}.json")
    with open(job, "w", encoding="utf-8") as f:
        json.dump(
            {
                "engine": engine, "path": path, "sentences": sentences, "batch_size": batch_size,
                "threads": threads, "repeats": args.repeats, "beam_size": args.beam_size, "alpha": args.alpha,
            },
            f,
        )
    command = [sys.executable, os.path.abspath(__file__), "--worker-input", job, "--worker-output", result]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": str(threads)}
    completed = subprocess.run(command, env=environment, capture_output=True, text=True)
    if completed.returncode:
        raise SystemExit(f"the {engine} worker failed:\n{completed.stderr[-3000:]}")
    with open(result, encoding="utf-8") as f:
        return json.load(f)


# The run.


def export_both(args, scratch):
    """Exports the run's weights as a SavedModel and for CTranslate2; returns their paths."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from app.decoding.translate import DecodingConfig
    from app.export.ctranslate2 import export_ctranslate2
    from app.export.saved_model import export, export_metadata, load_translator

    decoding = DecodingConfig(args.beam_size, args.alpha, MAX_EXTRA_LENGTH)
    translator, weights = load_translator(args.model_dir, decoding=decoding)
    metadata = export_metadata(args.model_dir, weights, decoding)
    saved_model = export(translator, os.path.join(scratch, "savedmodel"), 1, metadata)
    converted = export_ctranslate2(translator, os.path.join(scratch, "ctranslate2"), 1, metadata)
    return weights, saved_model, converted


def machine_header():
    """Lines naming the command, the CPU and the library versions."""
    import ctranslate2
    import tensorflow as tf

    return machine.machine_header([f"TensorFlow {tf.__version__}", f"CTranslate2 {ctranslate2.__version__}"])


def target_tokens(translations, model_path):
    """Sentencepiece pieces of `translations`, plus one end token each."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_path, "subwords.model"))
    return sum(len(ids) + 1 for ids in processor.encode(translations, out_type=int))


def bleu(translations, references):
    """`(sacreBLEU, lowercased BLEU)`, or Nones without references."""
    if references is None:
        return None, None
    import sacrebleu

    return (
        sacrebleu.corpus_bleu(translations, [references]).score,
        sacrebleu.corpus_bleu(translations, [references], lowercase=True).score,
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default=os.path.join("runs", "tiny-multi30k-en-de"), help="the training run")
    parser.add_argument(
        "--split", choices=tuple(SPLIT_FILES), default="test_2016_flickr",
        help="the bundled Multi30k split to translate (default test_2016_flickr)",
    )
    parser.add_argument("--file", help="translate this file's lines instead of a split")
    parser.add_argument("--reference", help="with --file: its reference translations, for BLEU")
    parser.add_argument("--sentences", type=positive_int, help="only the first N sentences")
    parser.add_argument("--batch-sizes", type=int_list(), default="1,32", help="comma-separated (default 1,32)")
    parser.add_argument("--beam-size", type=positive_int, default=4)
    parser.add_argument(
        "--alpha", type=float_at_least(0), default=0.6,
        help="length penalty: GNMT's for the SavedModel, CTranslate2's own for it (default 0.6)",
    )
    parser.add_argument(
        "--threads", type=int_list(), default="1,2",
        help="comma-separated thread counts, each engine timed at each (default 1,2)",
    )
    parser.add_argument("--repeats", type=positive_int, default=1, help="timed passes; the fastest counts")
    parser.add_argument(
        "--engines", default=",".join(ENGINES),
        help=f"comma-separated, of {', '.join(ENGINES)} (default all; ratios need ctranslate2-float32)",
    )
    parser.add_argument("--worker-input", help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reference and not args.file:
        parser.error("--reference goes with --file")
    engines = [name for name in args.engines.split(",") if name]
    unknown = [name for name in engines if name not in ENGINES]
    if unknown or not engines:
        parser.error(f"--engines {args.engines!r}: expected some of {', '.join(ENGINES)}")
    args.engines = engines
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker_input:
        return run_worker(args)
    from app.export.ctranslate2 import import_ctranslate2
    from app.model_dir.settings import load_settings

    import_ctranslate2()  # its install hint before the slow part
    _, data_config, _ = load_settings(args.model_dir)
    sources, references = read_sentences(args, data_config.source_lang, data_config.target_lang)
    for line in machine_header():
        print(line)
    scratch = tempfile.mkdtemp(prefix="bench_vs_ctranslate2_")
    try:
        weights, saved_model, converted = export_both(args, scratch)
        paths = {"savedmodel": saved_model, "ctranslate2-float32": converted, "ctranslate2-int8": converted}
        print(
            f"{len(sources)} sentences ({args.file or args.split}), beam {args.beam_size}, alpha {args.alpha}, "
            f"{', '.join(map(str, args.threads))} threads per engine, each in its own process; weights: {weights}",
            flush=True,
        )
        header = (
            f"{'engine':<22}{'threads':>8}{'batch':>6}{'seconds':>9}{'sent/s':>9}{'tokens/s':>10}"
            f"{'vs ct2 float32':>16}{'sacreBLEU':>11}{'lc BLEU':>9}"
        )
        print(header)
        print("-" * len(header))
        for threads, batch_size in [(t, b) for b in args.batch_sizes for t in args.threads]:
            rows = {
                engine: time_engine(engine, paths[engine], sources, batch_size, threads, args, scratch)
                for engine in args.engines
            }
            reference_speed = None
            if "ctranslate2-float32" in rows:
                reference_speed = len(sources) / rows["ctranslate2-float32"]["seconds"]
            for engine, row in rows.items():
                speed = len(sources) / row["seconds"]
                tokens = target_tokens(row["translations"], converted)
                sacre, lowercased = bleu(row["translations"], references)
                ratio = f"{speed / reference_speed:.2f}x" if reference_speed else "-"
                print(
                    f"{engine:<22}{threads:>8}{batch_size:>6}{row['seconds']:>9.2f}{speed:>9.1f}"
                    f"{tokens / row['seconds']:>10,.0f}"
                    f"{ratio:>16}{'-' if sacre is None else f'{sacre:.2f}':>11}"
                    f"{'-' if lowercased is None else f'{lowercased:.2f}':>9}",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
