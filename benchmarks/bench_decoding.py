"""Beam-search decoding throughput, with the key/value cache and without, side by side.

    python benchmarks/bench_decoding.py                         # tiny, beam 4, batch 1 and 32
    python benchmarks/bench_decoding.py --sizes tiny,base --batch-sizes 1,32

For each model size (random weights) and batch size it times `translate_ids` (encode
once, cached decoder steps) and a beam search whose `symbols_to_logits_fn` re-runs the
whole model `model([source, ids[:, :step + 1]])` at every step (no cache), both inside a
`tf.function` with the serving input signature, after one warm-up call that traces it.
It prints sentences/s, generated target tokens/s (the best hypothesis of each sentence,
end token included) and the speed-up of the cache.

A model with random weights almost never picks the end token, so every hypothesis runs
to its maximum length, source length + max_extra_length (default 16 + 8 = 24 output
tokens, about a Multi30k sentence), and both decoders do the same number of steps.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from app.decoding.beam_search import beam_search  # noqa: E402
from app.model.config import ModelConfig  # noqa: E402
from app.training.recipes import RECIPES  # noqa: E402
from app.decoding.model_search import translate_ids  # noqa: E402
from app.cli.flag_types import float_at_least, int_at_least, int_list, name_list, positive_int  # noqa: E402
from app.model.transformer import Transformer, build_transformer  # noqa: E402
from data.config import DEFAULT_VOCAB_SIZE  # noqa: E402
from layers.special_tokens import END_ID, PAD_ID, START_ID  # noqa: E402


def cached_decoder(transformer, beam_size, alpha, max_extra_length):
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def decode(source_ids):
        return translate_ids(transformer, source_ids, beam_size, alpha, max_extra_length)

    return decode


def uncached_decoder(model, vocab_size, beam_size, alpha, max_extra_length):
    """Beam search that re-runs the full model over the whole prefix at every step."""

    def symbols_to_logits(ids, step, cache):
        logits = model([cache["source_ids"], ids[:, : step + 1]], training=False)  # [B * K, T, V]
        return logits[:, -1, :], cache  # [B * K, V]

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def decode(source_ids):
        source_lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # [B]
        return beam_search(
            symbols_to_logits,
            tf.fill(tf.shape(source_ids)[:1], START_ID),
            {"source_ids": source_ids},
            vocab_size,
            max_lengths=source_lengths + max_extra_length,
            beam_size=beam_size,
            alpha=alpha,
        )

    return decode


def time_decoder(decode, source_ids, repeats):
    """Seconds per call (the best of `repeats` after a warm-up) and the output tokens."""
    ids, _ = decode(source_ids)  # traces, and runs once
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        ids, _ = decode(source_ids)
        ids = ids.numpy()
        best = min(best, time.perf_counter() - start)
    best_rows = ids[:, 0, :]  # [B, L]
    lengths = np.where((best_rows == END_ID).any(axis=1), (best_rows == END_ID).argmax(axis=1) + 1, best_rows.shape[1])
    return best, int(lengths.sum()), ids


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", type=name_list(RECIPES, "size"), default="tiny",
        help=f"comma-separated model sizes ({', '.join(RECIPES)})",
    )
    parser.add_argument("--batch-sizes", type=int_list(), default="1,32", help="comma-separated sentences per batch")
    parser.add_argument("--beam-size", type=positive_int, default=4)
    parser.add_argument("--alpha", type=float_at_least(0), default=0.6)
    # Random source ids are drawn above the reserved ones (padding, start, end, unknown).
    parser.add_argument(
        "--vocab-size", type=int_at_least(5), default=DEFAULT_VOCAB_SIZE, help="at least 5: ids 0-3 are reserved"
    )
    parser.add_argument(
        "--source-length", type=positive_int, default=16, help="source ids per sentence, its end id included"
    )
    parser.add_argument("--max-extra-length", type=int_at_least(0), default=8)
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="timed calls per measurement; the best counts"
    )
    parser.add_argument("--no-uncached", action="store_true", help="skip the decoder without cache")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    print(
        f"beam {args.beam_size}, alpha {args.alpha}, vocabulary {args.vocab_size}, source length "
        f"{args.source_length}, output length {args.source_length + args.max_extra_length}, "
        f"{os.cpu_count()} CPUs, TensorFlow {tf.__version__}"
    )
    header = f"{'size':<6} {'batch':>5} {'decoder':<9} {'s/batch':>8} {'sent/s':>8} {'tokens/s':>9} {'speed-up':>8}"
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        keras.utils.set_random_seed(0)
        config = ModelConfig.from_size(size, vocab_size=args.vocab_size)
        model = build_transformer(config)
        transformer = Transformer(model, config)
        decoders = {"cached": cached_decoder(transformer, args.beam_size, args.alpha, args.max_extra_length)}
        if not args.no_uncached:
            decoders["uncached"] = uncached_decoder(
                model, config.vocab_size, args.beam_size, args.alpha, args.max_extra_length
            )
        for batch_size in args.batch_sizes:
            rng = np.random.default_rng(batch_size)
            source_ids = rng.integers(4, config.vocab_size, size=[batch_size, args.source_length], dtype=np.int32)
            source_ids[:, -1] = END_ID
            source_ids = tf.constant(source_ids)
            seconds = {}
            outputs = {}
            for name, decode in decoders.items():
                seconds[name], tokens, outputs[name] = time_decoder(decode, source_ids, args.repeats)
                speed_up = f"{seconds['uncached'] / seconds['cached']:.1f}x" if name == "uncached" else ""
                print(
                    f"{size:<6} {batch_size:>5} {name:<9} {seconds[name]:>8.3f} "
                    f"{batch_size / seconds[name]:>8.1f} {tokens / seconds[name]:>9.0f} {speed_up:>8}",
                    flush=True,
                )
            if "uncached" in outputs:
                agree = np.mean(outputs["cached"][:, 0] == outputs["uncached"][:, 0])
                print(f"{'':<6} {'':>5} best hypotheses agree on {agree:.1%} of positions")


if __name__ == "__main__":
    main()
