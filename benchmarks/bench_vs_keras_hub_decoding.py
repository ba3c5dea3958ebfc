"""Beam-search decoding speed against keras-hub's translation example, same size, one run.

    python benchmarks/bench_vs_keras_hub_decoding.py                     # tiny, batch 1 and 32
    python benchmarks/bench_vs_keras_hub_decoding.py --sizes tiny,small --repeats 3
    python benchmarks/bench_vs_keras_hub_decoding.py --no-eager          # skip the slowest row

Beam 4, the first `--batch-sizes` sentences of Multi30k validation (en->de, the
project's subword ids, sources of at most 40 ids), decoded three ways:

- project: `translate_ids` (app/decoding/model_search.py), the path export.py serves: the encoder
  runs once, the decoder one position per step with its key/value cache, inside a
  `tf.function`; length penalty alpha 0.6.
- keras-hub, tf.function: the example's `decode_sequences` with
  `keras_hub.samplers.BeamSampler(num_beams=4)` in place of its greedy sampler, batched:
  the source padded to 40 and repeated once per beam (the sampler folds the beams into
  the batch), a prompt of 40 positions (start token, then padding), and a `next()` that
  re-runs the whole model, encoder included, over the whole 40-position prompt at every
  step and reads the logits at `index - 1`. No cache, as in the example. Wrapped in a
  `tf.function`, as keras-hub's own `generate()` does.
- keras-hub, eager: the same function called as the example calls it, eagerly.

The same model size for both (benchmarks/keras_hub_peer.py), untrained, seeded weights:
speed only, the translations mean nothing. The same number of output tokens for both,
39 per sentence (the prompt's 40 positions less the start token):
- keras-hub: `stop_token_ids=None`, so the sampler fills all 39 positions;
- project: every sentence may have 39 output tokens (`max_extra_length` = 39 - its source
  length), the last of them the end token the search forces at the limit. So that random
  weights never end a hypothesis earlier (which would let the search stop sooner), the
  end token's row of the shared embedding is zeroed: its logit is then 0 while the best
  of 8,000 roughly standard-normal logits are near 3.5, so it never enters the beams.
The script counts the tokens each side produced (the best hypothesis, end token
included) and prints them; tokens/s uses those counts; "project / this" is the project's
tokens/s over the row's. Each figure is the best of `--repeats` calls after one warm-up
call (tracing).
"""

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from app.model.config import ModelConfig  # noqa: E402
from app.training.recipes import RECIPES  # noqa: E402
from app.decoding.model_search import translate_ids  # noqa: E402
from app.cli.flag_types import float_at_least, int_list, name_list, positive_int  # noqa: E402
from app.model.transformer import Transformer, build_transformer  # noqa: E402
from benchmarks.keras_hub_peer import (  # noqa: E402
    MAX_SEQUENCE_LENGTH,
    build_keras_hub_transformer,
    machine_header,
    pack,
)
from data.config import DataConfig  # noqa: E402
from data.dataset import prepare_data  # noqa: E402
from layers.special_tokens import END_ID, PAD_ID, START_ID  # noqa: E402

OUTPUT_TOKENS = MAX_SEQUENCE_LENGTH - 1  # per sentence, both sides


def project_decoder(transformer, beam_size, alpha):
    """`decode(source_ids [B, S], max_extra_length [B]) -> (ids [B, K, L], scores)`."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])
    def decode(source_ids, max_extra_length):
        return translate_ids(transformer, source_ids, beam_size, alpha, max_extra_length)

    return decode


def keras_hub_decoder(model, beam_size, compiled):
    """The example's `decode_sequences` with a beam sampler: `decode(source [B, 40]) -> [B, 40]`."""
    sampler = keras_hub.samplers.BeamSampler(num_beams=beam_size)

    def decode(encoder_input_tokens):
        batch_size = ops.shape(encoder_input_tokens)[0]
        # The sampler folds the beams into the batch: one copy of the source per beam.
        encoder_tokens = ops.repeat(encoder_input_tokens, beam_size, axis=0)  # [B * K, 40]

        def next(prompt, cache, index):
            logits = model([encoder_tokens, prompt])[:, index - 1, :]  # [B * K, V]
            return logits, None, cache

        start = ops.full((batch_size, 1), START_ID)
        pad = ops.full((batch_size, MAX_SEQUENCE_LENGTH - 1), PAD_ID)
        prompt = ops.concatenate((start, pad), axis=-1)  # [B, 40]
        return sampler(next, prompt, stop_token_ids=None, index=1)  # [B, 40], best beam

    if compiled:
        return tf.function(decode, input_signature=[tf.TensorSpec([None, MAX_SEQUENCE_LENGTH], tf.int32)])
    return decode


def best_of(call, repeats):
    """Seconds of the fastest of `repeats` calls after a warm-up call, and the last output."""
    output = call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        output = call()
        output = tf.nest.map_structure(lambda x: x.numpy(), output)
        best = min(best, time.perf_counter() - start)
    return best, output


def project_tokens(ids):
    """Output tokens of the best hypotheses of `ids [B, K, L]`, end token included."""
    best = ids[:, 0, :]  # [B, L]
    ends = best == END_ID
    return int(np.where(ends.any(axis=1), ends.argmax(axis=1) + 1, best.shape[1]).sum())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", type=name_list(RECIPES, "size"), default="tiny",
        help=f"comma-separated model sizes ({', '.join(RECIPES)})",
    )
    parser.add_argument(
        "--batch-sizes", type=int_list(), default="1,32",
        help="comma-separated sentences per batch, the first of Multi30k validation",
    )
    parser.add_argument("--beam-size", type=positive_int, default=4)
    parser.add_argument("--alpha", type=float_at_least(0), default=0.6, help="project side's length penalty")
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="timed calls per figure; the best counts"
    )
    parser.add_argument("--no-eager", action="store_true", help="skip keras-hub called eagerly")
    parser.add_argument("--vocab-dir", help="directory with subwords.model (default: train one, as train.py does)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    for line in machine_header():
        print(line)
    print(
        f"beam {args.beam_size}, {OUTPUT_TOKENS} output tokens per sentence on both sides, the first sentences "
        f"of Multi30k validation with at most {MAX_SEQUENCE_LENGTH} source ids, untrained weights",
        flush=True,
    )
    vocab_dir = args.vocab_dir
    if vocab_dir is None:
        # A vocabulary for this run only: removed when it ends.
        vocab_dir = tempfile.mkdtemp(prefix="bench_vs_keras_hub_")
        atexit.register(shutil.rmtree, vocab_dir, ignore_errors=True)
    data = prepare_data(DataConfig(batch_tokens=4096), vocab_dir)
    sources = [row for row in data.tokens["validation"].source.to_list() if len(row) <= MAX_SEQUENCE_LENGTH]
    # Known only now, with the vocabulary: a larger batch would be labelled with sentences it lacks.
    if max(args.batch_sizes) > len(sources):
        raise SystemExit(
            f"--batch-sizes {max(args.batch_sizes)}: only {len(sources)} validation sentences have at most "
            f"{MAX_SEQUENCE_LENGTH} source ids"
        )

    header = (
        f"{'size':<6}{'batch':>6}  {'decoder':<30}{'s/batch':>9}{'sent/s':>9}{'tokens':>8}{'tokens/s':>10}"
        f"{'project / this':>16}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        config = ModelConfig.from_size(size, vocab_size=data.tokenizer.vocab_size)
        keras.utils.set_random_seed(0)
        model = build_transformer(config)
        embeddings = model.get_layer("shared_embedding").embeddings
        embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[END_ID]], tf.zeros([1, config.d_model])))
        keras.utils.set_random_seed(0)
        peer = build_keras_hub_transformer(config)
        decoders = {
            "project (cached, tf.function)": project_decoder(Transformer(model, config), args.beam_size, args.alpha),
            "keras-hub (tf.function)": keras_hub_decoder(peer, args.beam_size, compiled=True),
        }
        if not args.no_eager:
            decoders["keras-hub (eager, example)"] = keras_hub_decoder(peer, args.beam_size, compiled=False)

        for batch_size in args.batch_sizes:
            rows = sources[:batch_size]
            padded = tf.ragged.constant(rows, dtype=tf.int32).to_tensor()  # [B, S], the project's input
            extra = tf.constant([OUTPUT_TOKENS - len(row) for row in rows], tf.int32)  # [B]
            fixed = tf.constant(pack(rows, MAX_SEQUENCE_LENGTH))  # [B, 40], the example's input
            for name, decode in decoders.items():
                if name.startswith("project"):
                    seconds, (ids, _) = best_of(lambda: decode(padded, extra), args.repeats)
                    tokens = project_tokens(ids)
                    project_speed = tokens / seconds
                else:
                    seconds, ids = best_of(lambda: decode(fixed), args.repeats)
                    tokens = ids[:, 1:].size  # every position after the start token
                print(
                    f"{size:<6}{batch_size:>6}  {name:<30}{seconds:>9.3f}{batch_size / seconds:>9.1f}"
                    f"{tokens:>8}{tokens / seconds:>10,.0f}{project_speed / (tokens / seconds):>15.1f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
