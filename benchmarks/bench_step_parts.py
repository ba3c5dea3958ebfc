"""Five parts of the training step, each timed against an alternative in one run.

    python benchmarks/bench_step_parts.py                  # tiny's shapes: 4,096 tokens
    python benchmarks/bench_step_parts.py --tokens 6144 --d-model 256 --d-ff 1024   # small's

- loss: the label-smoothed cross-entropy's forward and backward over `[tokens, vocab]`
  logits, as `app.training.losses` computes it (gradient written out, p - t) against TensorFlow's
  autodiff of the same loss (one-hot target, product, log-softmax).
- output: the pre-softmax projection of `[tokens, d_model]` decoder states onto the
  vocabulary followed by that loss, forward and backward: the whole `[tokens, vocab]`
  logits (the plain path) against `app.training.output_loss`, which projects, scores and
  back-projects 512 rows at a time.
- projections: the query, key and value projections of one self-attention layer,
  forward and backward, as three `[d_model, d_model]` matmuls (what
  `layers/multi_head_attention.py` does) against one fused `[d_model, 3 d_model]`
  matmul split three ways.
- dropout: one dropout (rate 0.2, tiny's) of `[tokens, d_model]` activations, forward and
  backward, in float32 and in bfloat16: Keras's `Dropout`, one 32-bit random number per
  element, against `layers/dropout.py`, one per two elements. The tiny model has 22.
- feed-forward: the two dense layers of a feed-forward block (d_model -> d_ff -> d_model),
  forward and backward in float32: Keras's `Dense` against `layers/dense.py`, which makes
  the wide-to-narrow layer's weight gradient as the transposed product.

Each figure is the median of `--repeats` timings of `--iterations` calls of a
`tf.function`, after one untimed call; the two sides of a pair alternate, so drift in
the machine's speed hits both.
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from app.training.losses import smoothed_cross_entropy  # noqa: E402
from app.training.output_loss import projected_loss_sum  # noqa: E402
from app.cli.flag_types import int_at_least, positive_int  # noqa: E402
from layers.dense import Dense  # noqa: E402
from layers.dropout import Dropout  # noqa: E402


def autodiff_smoothed_loss(labels, logits, label_smoothing):
    """The same loss as `smoothed_cross_entropy`, left to autodiff: `[B, T]`."""
    vocab_size = tf.shape(logits)[-1]
    off_value = label_smoothing / tf.cast(vocab_size - 1, tf.float32)
    targets = tf.one_hot(labels, vocab_size) * (1.0 - label_smoothing - off_value) + off_value
    return -tf.reduce_sum(targets * tf.nn.log_softmax(logits), axis=-1) * tf.cast(labels != 0, tf.float32)


def loss_steps(tokens, vocab_size, rng):
    """`{name: step}`: loss forward + gradient over `[tokens / 32, 32, vocab]` logits."""
    logits = tf.constant(rng.normal(scale=3.0, size=(tokens // 32, 32, vocab_size)).astype("float32"))
    labels = tf.constant(rng.integers(1, vocab_size, size=(tokens // 32, 32)).astype("int32"))

    def step_of(loss_fn):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(logits)
                loss = tf.reduce_sum(loss_fn(labels, logits, 0.1))
            return loss, tape.gradient(loss, logits)

        return step

    return {
        "loss, gradient written out (this project)": step_of(lambda *args: smoothed_cross_entropy(*args)[0]),
        "loss, autodiff": step_of(autodiff_smoothed_loss),
    }


def output_steps(tokens, vocab_size, d_model, rng):
    """`{name: step}`: projection onto the vocabulary + loss, forward + gradient of both inputs."""
    states = tf.constant(rng.normal(size=(tokens, d_model)).astype("float32"))
    matrix = tf.Variable(rng.normal(scale=d_model**-0.5, size=(vocab_size, d_model)).astype("float32"))
    labels = tf.constant(rng.integers(1, vocab_size, size=tokens).astype("int32"))

    def plain():
        logits = tf.matmul(states, matrix, transpose_b=True)  # [tokens, vocab]
        return tf.reduce_sum(smoothed_cross_entropy(labels[None], logits[None], 0.1)[0])

    def fused():
        return projected_loss_sum(states, tf.convert_to_tensor(matrix), labels, 0.1)

    def step_of(loss_fn):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(states)
                loss = loss_fn()
            return loss, tape.gradient(loss, [states, matrix])

        return step

    return {
        "output, whole logits (plain)": step_of(plain),
        "output, fused, 512 rows at a time (this project)": step_of(fused),
    }


def projection_steps(tokens, d_model, rng):
    """`{name: step}`: Q, K, V projections of `[tokens / 32, 32, d_model]`, forward + gradient."""
    inputs = tf.constant(rng.normal(size=(tokens // 32, 32, d_model)).astype("float32"))
    kernels = [tf.Variable(rng.normal(scale=0.05, size=(d_model, d_model)).astype("float32")) for _ in range(3)]
    biases = [tf.Variable(tf.zeros([d_model])) for _ in range(3)]
    fused_kernel = tf.Variable(tf.concat(kernels, axis=1))
    fused_bias = tf.Variable(tf.zeros([3 * d_model]))

    def separate():
        return [tf.tensordot(inputs, kernel, 1) + bias for kernel, bias in zip(kernels, biases)]

    def fused():
        return tf.split(tf.tensordot(inputs, fused_kernel, 1) + fused_bias, 3, axis=-1)

    def step_of(project, variables):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                # A stand-in for the rest of the layer: any scalar of all three outputs.
                loss = tf.add_n([tf.reduce_sum(output * output) for output in project()])
            return tape.gradient(loss, variables)

        return step

    return {
        "Q/K/V, three matmuls (this project)": step_of(separate, kernels + biases),
        "Q/K/V, one fused matmul": step_of(fused, [fused_kernel, fused_bias]),
    }


def dropout_steps(tokens, d_model, dtype, rng):
    """`{name: step}`: dropout of `[tokens / 32, 32, d_model]` in `dtype`, forward + gradient."""
    inputs = tf.cast(rng.normal(size=(tokens // 32, 32, d_model)).astype("float32"), dtype)
    policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"

    def step_of(layer):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                outputs = layer(inputs, training=True)
                # A stand-in for the rest of the step: any scalar of the outputs.
                loss = tf.reduce_sum(tf.cast(outputs, tf.float32))
            return tape.gradient(loss, inputs)

        return step

    return {
        f"dropout {dtype}, Keras, 32-bit draws": step_of(keras.layers.Dropout(0.2, dtype=policy)),
        f"dropout {dtype}, 16-bit draws (this project)": step_of(Dropout(0.2, dtype=policy)),
    }


def dense_steps(tokens, d_model, d_ff, rng):
    """`{name: step}`: a feed-forward block's two dense layers (d_model -> d_ff -> d_model)
    on `[tokens / 32, 32, d_model]` float32, forward + gradient of inputs and weights."""
    inputs = tf.constant(rng.normal(size=(tokens // 32, 32, d_model)).astype("float32"))

    def step_of(dense_class):
        inner, outer = dense_class(d_ff, activation="relu"), dense_class(d_model)
        inner.build(inputs.shape)
        outer.build((*inputs.shape[:-1], d_ff))
        variables = inner.trainable_variables + outer.trainable_variables

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                # A stand-in for the rest of the step: any scalar of the outputs.
                loss = tf.reduce_sum(outer(inner(inputs)))
            return tape.gradient(loss, [inputs, *variables])

        return step

    return {
        "feed-forward, Keras's Dense": step_of(keras.layers.Dense),
        "feed-forward, gradients turned (this project)": step_of(Dense),
    }


def time_pair(steps, iterations, repeats):
    """Median seconds per call of each step, timed alternately."""
    for step in steps.values():
        step()  # trace
    timings = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.perf_counter()
            for _ in range(iterations):
                step()
            timings[name].append((time.perf_counter() - started) / iterations)
    return {name: statistics.median(values) for name, values in timings.items()}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tokens", type=positive_int, default=4096, help="target tokens in the batch (a multiple of 32)"
    )
    # Label smoothing spreads over the vocabulary's other tokens: there must be one.
    parser.add_argument("--vocab", type=int_at_least(2), default=8000)
    parser.add_argument("--d-model", type=positive_int, default=128)
    parser.add_argument(
        "--d-ff", type=positive_int, default=256, help="the feed-forward width (tiny's by default)"
    )
    parser.add_argument("--iterations", type=positive_int, default=10)
    parser.add_argument("--repeats", type=positive_int, default=5)
    args = parser.parse_args(argv)
    # Most pairs take the tokens as rows of 32; the rest would be dropped there and not elsewhere.
    if args.tokens % 32:
        parser.error(f"--tokens must be a multiple of 32 (rows of 32 tokens), got {args.tokens}")
    return args


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{args.tokens} tokens, vocabulary {args.vocab}, d_model {args.d_model}, d_ff {args.d_ff}; "
          f"median of {args.repeats} x {args.iterations} calls")
    pairs = (
        loss_steps(args.tokens, args.vocab, rng),
        output_steps(args.tokens, args.vocab, args.d_model, rng),
        projection_steps(args.tokens, args.d_model, rng),
        dropout_steps(args.tokens, args.d_model, "float32", rng),
        dropout_steps(args.tokens, args.d_model, "bfloat16", rng),
        dense_steps(args.tokens, args.d_model, args.d_ff, rng),
    )
    for steps in pairs:
        timings = time_pair(steps, args.iterations, args.repeats)
        reference = next(iter(timings.values()))
        for name, seconds in timings.items():
            print(f"  {name:<50}{seconds * 1000:8.2f} ms{seconds / reference:8.2f}x")


if __name__ == "__main__":
    main()
