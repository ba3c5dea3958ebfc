"""Beam-search translation speed against CTranslate2 on the same weights, one run.

    python benchmarks/bench_vs_ctranslate2.py --model-dir runs/tiny-multi30k-en-de      # test_2016_flickr
    python benchmarks/bench_vs_ctranslate2.py --model-dir DIR --split validation --sentences 200
    python benchmarks/bench_vs_ctranslate2.py --model-dir DIR --file news.en --reference news.de --threads 4,8
    python benchmarks/bench_vs_ctranslate2.py --model-dir DIR --engines savedmodel,ctranslate2-float32 --rounds 5

The model directory's weights, chosen and averaged as `python export.py` chooses them,
are exported into a temporary directory: as the SavedModel (app/export/saved_model.py)
and converted weight for weight into CTranslate2's TransformerSpec
(app/export/ctranslate2.py). The same real sentences (a Multi30k split of the run's
language pair, or `--file`), in their order, are then translated in batches of each
`--batch-sizes` (beam `--beam-size`) by:

- savedmodel: its `serving_default` signature, strings in and out (tokenizer, encoder,
  beam search and detokenizer in the graph), GNMT length penalty `--alpha`, each call's
  sentences split into export.py's default number of parallel beam searches;
- savedmodel-one-search: the same with `--parallel-searches 1`, one search per call;
- ctranslate2-float32 and ctranslate2-int8: `Translator.translate_batch` on the converted
  model (int8: its weights quantized when loaded), with the sentencepiece tokenization
  and detokenization of serving (app/serving/ctranslate2_version.py) inside the timing,
  CTranslate2's own length penalty (log-probability / length ** `--alpha`), and one output
  limit per batch, its longest sentence's (source length + 50, within the model's positions).

Each engine runs in a process of its own, at each of `--threads` thread counts
(TensorFlow's intra- and inter-op pools; CTranslate2's intra_threads): beside TensorFlow
in one process, CTranslate2's threads ran 3-20x slower, and on a 2-core machine
TensorFlow's decoding ran faster with one thread than with two, so both are timed.
On a shared virtual machine one configuration's speed moved by up to 2x from minute to
minute, and timed one after the other the two engines' ratio ranged from 0.36x to
0.71x over three rounds. So the engines take turns: all are loaded and warmed up, then
each translates a chunk of about `--chunk-sentences` sentences before the next chunk
starts, and a round's time is the sum of its chunks'. Printed per engine, thread count
and batch size, over `--rounds` rounds: the median of sentences/s and of target
tokens/s (the translations' sentencepiece pieces, one end token each), the median of
the speed over CTranslate2 float32's at the same threads and batch size with its
lowest and highest, and the sacreBLEU (and lowercased BLEU) of the translations against
the references.
"""

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from benchmarks import machine  # noqa: E402
from app.cli.flag_types import float_at_least, int_list, positive_int  # noqa: E402
from data.corpora import MULTI30K_SCORED_SPLITS, read_multi30k_lines  # noqa: E402
from data.errors import DataError  # noqa: E402

# savedmodel-one-search: the export with `--parallel-searches 1`, every call's sentences in one
# beam search, as exports were before the searches were split.
ENGINES = ("savedmodel", "savedmodel-one-search", "ctranslate2-float32", "ctranslate2-int8")
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
        try:
            sources, references = (read_multi30k_lines(args.split, lang) for lang in (source_lang, target_lang))
        except DataError as error:
            raise SystemExit(f"--split reads the bundled Multi30k ({error}); give --file for other data") from None
    if args.sentences:
        sources = sources[: args.sentences]
        references = references[: args.sentences] if references else None
    if not sources:
        raise SystemExit("no sentences to translate")
    return sources, references


def batches(items, size):
    return [items[i : i + size] for i in range(0, len(items), size)]


# Workers: one engine, one batch size, in a process of its own.


def savedmodel_translator(path, threads, one_thread_per_op=False):
    """`translate(batch of strings) -> strings` by the SavedModel's serving_default, with
    `threads` in each of TensorFlow's pools, or one per op and `threads` ops at once."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    tf.config.threading.set_intra_op_parallelism_threads(1 if one_thread_per_op else threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    serving_default = tf.saved_model.load(path).signatures["serving_default"]

    def translate(batch):
        outputs = serving_default(inputs=tf.constant(batch, tf.string))["translations"].numpy()
        return [text.decode("utf-8") for text in outputs]

    return translate


def ctranslate2_translator(path, threads, compute_type, beam_size, alpha):
    """`translate(batch of strings) -> strings` by CTranslate2's translate_batch."""
    from app.serving.ctranslate2_version import Engine
    from layers.special_tokens import END_ID

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

    return translate


# A worker process holds one engine and translates the chunks the parent names, one at
# a time, so that the engines of a comparison run by turns, seconds apart.
REPLY = "@@bench "


def run_worker(args):
    """Loads the job's engine, warms it up, then answers `chunk START END` on stdin with
    the seconds that translating sentences[START:END] in batches took, until `quit`,
    when it writes every chunk's translations, in order, to `--worker-output`."""
    with open(args.worker_input, encoding="utf-8") as f:
        job = json.load(f)
    if job["engine"].startswith("savedmodel"):
        translate = savedmodel_translator(job["path"], job["threads"], job["one_thread_per_op"])
    else:
        compute_type = job["engine"].split("-")[1]
        translate = ctranslate2_translator(job["path"], job["threads"], compute_type, job["beam_size"], job["alpha"])
    sentences, batch_size = job["sentences"], job["batch_size"]
    translate(sentences[:batch_size])  # warm-up: the SavedModel's first call traces
    translations = {}
    print(REPLY + "ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command == ["quit"]:
            break
        first, last = int(command[1]), int(command[2])
        start = time.perf_counter()
        texts = [text for batch in batches(sentences[first:last], batch_size) for text in translate(batch)]
        print(f"{REPLY}{time.perf_counter() - start!r}", flush=True)
        translations.setdefault(first, texts)
    with open(args.worker_output, "w", encoding="utf-8") as f:
        json.dump([text for first in sorted(translations) for text in translations[first]], f)


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, engine, path, sentences, batch_size, threads, args, scratch):
        self.engine = engine
        job = os.path.join(scratch, f"job-{engine}.json")
        self.output = os.path.join(scratch, f"result-{engine}.json")
        with open(job, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "engine": engine, "path": path, "sentences": sentences, "batch_size": batch_size,
                    "threads": threads, "one_thread_per_op": args.one_thread_per_op,
                    "beam_size": args.beam_size, "alpha": args.alpha,
                },
                f,
            )
        command = [sys.executable, os.path.abspath(__file__), "--worker-input", job, "--worker-output", self.output]
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": str(threads)}
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            command, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self._reply()  # ready

    def _reply(self):
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return line[len(REPLY):].strip()
        self.process.wait()
        self._fail()

    def _fail(self):
        self.stderr.seek(0)
        raise SystemExit(f"the {self.engine} worker failed:\n{self.stderr.read()[-3000:]}")

    def time_chunk(self, first, last):
        """Seconds the worker took to translate sentences[first:last]."""
        self.process.stdin.write(f"chunk {first} {last}\n")
        self.process.stdin.flush()
        return float(self._reply())

    def translations(self):
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        if self.process.wait():
            self._fail()
        with open(self.output, encoding="utf-8") as f:
            return json.load(f)


def chunk_bounds(count, batch_size, chunk_sentences):
    """`[(first, last), ...]` cutting `count` sentences into chunks of whole batches, each
    of about `chunk_sentences` sentences (at least one batch)."""
    step = max(1, round(chunk_sentences / batch_size)) * batch_size
    return [(first, min(first + step, count)) for first in range(0, count, step)]


def time_by_turns(engines, paths, sentences, batch_size, threads, args, scratch):
    """`({engine: [seconds of each round]}, {engine: translations})`.

    Every engine is loaded in a process of its own. Then, in each of `--rounds` rounds,
    the sentences are cut into chunks of about `--chunk-sentences`, and every engine in
    turn translates a chunk before the next chunk starts, the order of the turn reversed
    from one chunk to the next: on a machine whose speed drifts, both engines of a ratio
    see the same minutes. A round's seconds are the sum of its chunks'.
    """
    workers = []
    try:
        for engine in engines:
            workers.append(Worker(engine, paths[engine], sentences, batch_size, threads, args, scratch))
        chunks = chunk_bounds(len(sentences), batch_size, args.chunk_sentences)
        seconds = {engine: [] for engine in engines}
        for _ in range(args.rounds):
            totals = dict.fromkeys(engines, 0.0)
            for index, (first, last) in enumerate(chunks):
                for worker in workers if index % 2 == 0 else workers[::-1]:
                    totals[worker.engine] += worker.time_chunk(first, last)
            for engine in engines:
                seconds[engine].append(totals[engine])
        translations = {worker.engine: worker.translations() for worker in workers}
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.stderr.close()
    return seconds, translations


# The run.


def export_both(args, scratch):
    """Exports the run's weights as a SavedModel (and one with a single search, if that
    engine is timed) and for CTranslate2; returns the weights' name and each engine's path."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from app.decoding.config import DecodingConfig
    from app.export.ctranslate2 import export_ctranslate2
    from app.export.saved_model import export, export_metadata, load_translator

    decoding = DecodingConfig(args.beam_size, args.alpha, MAX_EXTRA_LENGTH)
    translator, weights = load_translator(args.model_dir, decoding=decoding)
    metadata = export_metadata(args.model_dir, weights, decoding)
    converted = export_ctranslate2(translator, os.path.join(scratch, "ctranslate2"), 1, metadata)
    paths = {
        "savedmodel": export(translator, os.path.join(scratch, "savedmodel"), 1, metadata),
        "ctranslate2-float32": converted,
        "ctranslate2-int8": converted,
    }
    if "savedmodel-one-search" in args.engines:
        # The graph's searches are fixed when it is traced: another Translator, the same weights.
        one_search = dataclasses.replace(decoding, parallel_searches=1)
        one_search_translator, _ = load_translator(args.model_dir, decoding=one_search)
        paths["savedmodel-one-search"] = export(
            one_search_translator, os.path.join(scratch, "savedmodel-one-search"), 1,
            export_metadata(args.model_dir, weights, one_search),
        )
    return weights, paths


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
        "--split", choices=MULTI30K_SCORED_SPLITS, default="test_2016_flickr",
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
    parser.add_argument(
        "--one-thread-per-op", action="store_true",
        help="the SavedModel with one thread per op and --threads ops at once (TensorFlow's intra- and inter-op "
        "pools), as docs/serving.md advises for decoding, rather than --threads in each pool",
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=3,
        help="passes over all sentences, the engines taking turns chunk by chunk; medians are printed (default 3)",
    )
    parser.add_argument(
        "--chunk-sentences", type=positive_int, default=64,
        help="about how many sentences an engine translates in its turn, in whole batches (default 64)",
    )
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
        weights, paths = export_both(args, scratch)
        print(
            f"{len(sources)} sentences ({args.file or args.split}), beam {args.beam_size}, alpha {args.alpha}, "
            f"{', '.join(map(str, args.threads))} threads per engine"
            f"{' (the SavedModel: one per op, that many ops at once)' if args.one_thread_per_op else ''}, "
            f"each in its own process, {args.rounds} rounds; "
            f"weights: {weights}",
            flush=True,
        )
        header = (
            f"{'engine':<22}{'threads':>8}{'batch':>6}{'sent/s':>9}{'tokens/s':>10}"
            f"{'vs ct2 float32':>16}{'lowest-highest':>16}{'sacreBLEU':>11}{'lc BLEU':>9}"
        )
        print(header)
        print("-" * len(header))
        for threads, batch_size in [(t, b) for b in args.batch_sizes for t in args.threads]:
            seconds, translations = time_by_turns(args.engines, paths, sources, batch_size, threads, args, scratch)
            for engine in args.engines:
                speeds = [len(sources) / each for each in seconds[engine]]
                tokens = target_tokens(translations[engine], paths["ctranslate2-float32"])
                sacre, lowercased = bleu(translations[engine], references)
                ratio, spread = "-", "-"
                if "ctranslate2-float32" in seconds:
                    # Speed over theirs, round by round: their seconds over ours.
                    ratios = [theirs / ours for ours, theirs in zip(seconds[engine], seconds["ctranslate2-float32"])]
                    ratio = f"{statistics.median(ratios):.2f}x"
                    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
                print(
                    f"{engine:<22}{threads:>8}{batch_size:>6}{statistics.median(speeds):>9.1f}"
                    f"{statistics.median(tokens / each for each in seconds[engine]):>10,.0f}"
                    f"{ratio:>16}{spread:>16}{'-' if sacre is None else f'{sacre:.2f}':>11}"
                    f"{'-' if lowercased is None else f'{lowercased:.2f}':>9}",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
