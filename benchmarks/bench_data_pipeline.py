"""Throughput of the data pipeline on Multi30k train: is it far ahead of training?

    python benchmarks/bench_data_pipeline.py                      # batch_tokens 4096
    python benchmarks/bench_data_pipeline.py --batch-tokens 25000 --epochs 3

Prints the one-off preparation (reading, vocabulary, tokenizing every split once) and
the speed of that tokenization pass alone, then per epoch the batches/s and non-padding tokens/s the pipeline delivers when nothing
consumes them. Epoch 0 includes tracing the tf.data functions and filling the
prefetch buffer; later epochs are the steady state. Compare them with the tokens/s that
training consumes: `benchmarks/bench_training.py`, and docs/lab-notebook/2026-11-21-speed-against-keras-hub-and-the-loss-gradient.md.
"""  # noqa: E501

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from app.cli.flag_types import int_at_least  # noqa: E402
from data import DataConfig, format_summary, prepare_data, summarize  # noqa: E402
from app.cli.flags import batch_tokens as batch_tokens_flag  # noqa: E402
from data.corpora import load_corpus  # noqa: E402
from data.pipeline import tokenize_pairs  # noqa: E402
from data.tokenizer import MODEL_FILENAME  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-tokens", type=batch_tokens_flag, default=4096)
    parser.add_argument(
        "--epochs", type=int_at_least(0), default=3, help="epochs timed after the preparation (0: none)"
    )
    parser.add_argument("--model-dir", default=None, help="vocabulary directory (default: a fresh temporary one)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    model_dir = args.model_dir
    if model_dir is None:
        # A vocabulary for this run only: removed when it ends.
        model_dir = tempfile.mkdtemp(prefix="bench_data_")
        atexit.register(shutil.rmtree, model_dir, ignore_errors=True)
    trains_vocabulary = not os.path.exists(os.path.join(model_dir, MODEL_FILENAME))
    start = time.perf_counter()
    data = prepare_data(DataConfig(batch_tokens=args.batch_tokens), model_dir)
    seconds = time.perf_counter() - start
    print(
        f"prepare_data: {seconds:.1f} s "
        f"({'trained' if trains_vocabulary else 'loaded'} vocabulary, tokenized all splits)"
    )
    print("\n".join(format_summary(summarize(data))))

    # Train tokenized in-graph in one process, for comparison with prepare_data's pass
    # (sentencepiece in worker processes into shards, which every epoch reads).
    train_text = load_corpus(data.config.dataset, data.config.source_lang, data.config.target_lang).splits["train"]
    start = time.perf_counter()
    pairs = tokenize_pairs(data.tokenizer, train_text)
    seconds = time.perf_counter() - start
    tokens = sum(int(lengths.sum()) for lengths in pairs.lengths())
    print(
        f"tokenizing train once: {seconds:.2f} s = {tokens / seconds:,.0f} tokens/s (source + target, markers included)"
    )

    for epoch in range(args.epochs):
        batches = source_tokens = target_tokens = 0
        start = time.perf_counter()
        for source, target in data.train_batches(epoch):
            # Counting forces the batch's values, as a training step would.
            source_tokens += int((source.numpy() != 0).sum())
            target_tokens += int((target.numpy() != 0).sum())
            batches += 1
        seconds = time.perf_counter() - start
        print(
            f"epoch {epoch}: {batches} batches in {seconds:.2f} s = {batches / seconds:,.0f} batches/s, "
            f"{source_tokens / seconds:,.0f} source + {target_tokens / seconds:,.0f} target "
            "non-padding tokens/s"
        )


if __name__ == "__main__":
    main()
