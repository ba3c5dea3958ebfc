"""layers.Dropout: Keras's dropout with 16-bit decisions, exact in what it keeps and how
often it drops."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import layers.dropout as dropout_module
from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from layers.dropout import DECISION_LEVELS, Dropout, applied_rate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 2**20  # elements in the statistical tests: a rate's standard error is under 0.0005


def _scale(rate):
    """What kept elements are multiplied by, as the layer computes it."""
    threshold = round(rate * DECISION_LEVELS)
    return np.float32(DECISION_LEVELS / (DECISION_LEVELS - threshold))


def _tolerance(rate, count):
    """Five standard errors of a dropped fraction over `count` elements."""
    return 5 * np.sqrt(rate * (1 - rate) / count)


def test_applied_rate_is_the_nearest_multiple_of_two_to_the_minus_16():
    assert applied_rate(0.1) == 6554 / 65536
    assert applied_rate(0.25) == 0.25
    assert applied_rate(0.0) == 0.0


def test_inference_and_rate_zero_return_the_inputs():
    x = tf.random.normal([3, 5, 8])
    assert Dropout(0.3)(x, training=False) is x
    assert Dropout(0.0)(x, training=True) is x


def test_every_element_is_dropped_or_scaled_exactly():
    x = tf.random.normal([64, 257])  # an odd number of elements: the last word is half used
    y = Dropout(0.1, seed=5)(x, training=True).numpy()
    kept = y != 0
    np.testing.assert_array_equal(y[kept], (x.numpy() * _scale(0.1))[kept])
    assert 0 < (~kept).sum() < kept.sum()


def test_a_draw_below_the_threshold_drops_and_one_at_it_keeps(monkeypatch):
    # The rule behind applied_rate(): of the 2^16 draws exactly `threshold` drop.
    threshold = round(0.1 * DECISION_LEVELS)  # 6554
    draws = tf.constant([0, threshold - 1, threshold, threshold + 1, DECISION_LEVELS - 1], tf.uint16)
    monkeypatch.setattr(dropout_module, "_uniform_uint16", lambda shape, seed_generator: draws)
    y = Dropout(0.1)(tf.ones([5]), training=True).numpy()
    np.testing.assert_array_equal(y, [0, 0, _scale(0.1), _scale(0.1), _scale(0.1)])


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.3, 0.5])
def test_dropped_fraction_is_the_applied_rate(rate):
    y = Dropout(rate, seed=11)(tf.ones([N]), training=True).numpy()
    dropped = np.mean(y == 0)
    assert abs(dropped - applied_rate(rate)) < _tolerance(rate, N)
    # Inverted dropout: the mean is kept.
    assert abs(y.mean() - 1.0) < 5 * np.sqrt(_scale(rate) - 1) / np.sqrt(N)


def test_both_halves_of_a_random_word_are_uniform_and_independent():
    """Neighbours share one 32-bit draw; each half must be a full, separate 16 bits."""
    draws = dropout_module._uniform_uint16([N], keras.random.SeedGenerator(3)).numpy()
    assert draws.dtype == np.uint16
    low, high = draws[0::2].astype(np.int64), draws[1::2].astype(np.int64)
    for half in (low, high):
        # Uniform on [0, 2^16): every one of 16 equal ranges holds 1/16 of the draws.
        counts = np.bincount(half >> 12, minlength=16) / half.size
        np.testing.assert_allclose(counts, 1 / 16, atol=_tolerance(1 / 16, half.size))
        # ...and within them, the low bits are uniform too.
        counts = np.bincount(half & 15, minlength=16) / half.size
        np.testing.assert_allclose(counts, 1 / 16, atol=_tolerance(1 / 16, half.size))
    both_low = np.mean((low < 16384) & (high < 16384))  # independent: 1/4 * 1/4
    assert abs(both_low - 1 / 16) < _tolerance(1 / 16, low.size)


def test_masks_differ_between_calls_and_repeat_for_a_seed():
    x = tf.ones([1000])
    layer = Dropout(0.5, seed=7)
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert np.mean(first != second) > 0.4  # independent masks differ in half the places
    np.testing.assert_array_equal(Dropout(0.5, seed=7)(x, training=True).numpy(), first)


class _OnReplica:
    """What `tf.distribute.get_replica_context()` returns on replica `index` of a strategy."""

    def __init__(self, index):
        self.replica_id_in_sync_group = index


def _words(seed, replica, monkeypatch, known=True):
    """The 64 random words layers.Dropout draws for `seed` (int32 [2]) on `replica`, whose
    index is a constant when traced (MirroredStrategy's) or, with `known=False`, a tensor
    only known when the graph runs."""

    def draw(index):
        monkeypatch.setattr(tf.distribute, "get_replica_context", lambda: _OnReplica(index))
        key, counter, alg = dropout_module.replica_stream(tf.constant(seed, tf.int32))
        return tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[64], key=key, counter=counter, alg=alg, dtype=tf.uint32
        )

    if known:
        return draw(tf.constant(replica)).numpy()
    return tf.function(draw, input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(replica)).numpy()


@pytest.mark.parametrize("known", [True, False], ids=["index known when traced", "index a tensor"])
def test_replica_0_draws_the_seeds_own_stream_and_every_other_replica_one_of_its_own(monkeypatch, known):
    seed = [1234567, 41]
    # Replica 0 draws what one replica drew before replicas had streams of their own.
    one_replica = tf.random.stateless_uniform([64], seed=seed, minval=None, maxval=None, dtype=tf.uint32).numpy()
    np.testing.assert_array_equal(_words(seed, 0, monkeypatch, known), one_replica)
    draws = [_words(seed, replica, monkeypatch, known) for replica in range(8)]
    # 64 independent 32-bit words agree in a place with probability 64 / 2^32 per pair.
    assert all(not np.any(draws[a] == draws[b]) for a in range(8) for b in range(a + 1, 8))


def test_a_replica_never_draws_an_earlier_calls_stream_again(monkeypatch):
    # Calls 25,544 and 174,653 of a layer whose generator is seeded 1234567 (its seed at
    # call c is [1234567, c]). The earlier rule gave replica r the seed
    # stateless_fold_in(seed, r) = [the first int32 of the seed's stream, r]: 32 bits for
    # the 62 of the seed, so these two calls' seeds on replica 1 were the same, and so were
    # its masks (7 such pairs in the layer's first 200,000 calls).
    first, second = [1234567, 25544], [1234567, 174653]
    folded = [tf.random.experimental.stateless_fold_in(seed, 1).numpy() for seed in (first, second)]
    np.testing.assert_array_equal(folded[0], folded[1])
    assert not np.any(_words(first, 1, monkeypatch) == _words(second, 1, monkeypatch))


def test_gradient_is_the_mask_times_the_scale():
    x = tf.random.normal([40, 33])
    weights = tf.random.normal([40, 33])
    layer = Dropout(0.2, seed=9)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        total = tf.reduce_sum(y * weights)
    gradient = tape.gradient(total, x).numpy()
    kept = y.numpy() != 0
    np.testing.assert_array_equal(gradient, np.where(kept, weights.numpy() * _scale(0.2), 0))


def test_bfloat16_inputs_stay_bfloat16():
    x = tf.cast(tf.random.normal([32, 64]), tf.bfloat16)
    y = Dropout(0.1, seed=2, dtype="mixed_bfloat16")(x, training=True)
    assert y.dtype == tf.bfloat16
    kept = y.numpy() != 0
    expected = (x * tf.cast(_scale(0.1), tf.bfloat16)).numpy()
    np.testing.assert_array_equal(y.numpy()[kept], expected[kept])


def test_a_bad_rate_is_named():
    with pytest.raises(ValueError, match="1.5"):
        Dropout(1.5)


def test_a_noise_shape_drops_whole_slices_and_a_rate_of_one_everything():
    ones = tf.ones([6, 50])
    np.testing.assert_array_equal(Dropout(1.0)(ones, training=True).numpy(), np.zeros([6, 50]))
    # A noise shape of [6, 1] (or [None, 1]) drops whole rows: one decision a row, broadcast.
    for noise_shape in ((6, 1), (None, 1)):
        rows = Dropout(0.5, noise_shape=noise_shape, seed=1)(ones, training=True).numpy()
        assert all(len(set(row)) == 1 for row in rows)
        assert {row[0] for row in rows} == {0.0, 2.0}
    # Three dimensions, the middle one shared: [4, 1, 8] decisions for [4, 5, 8].
    x = tf.ones([4, 5, 8])
    y = Dropout(0.5, noise_shape=(None, 1, None), seed=2)(x, training=True).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1, :], y.shape))


def test_other_backends_draw_one_number_per_element(monkeypatch):
    """Off TensorFlow and JAX the draws come from keras.random.randint, one per element."""
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    y = Dropout(0.3, seed=4)(tf.ones([N]), training=True).numpy()
    assert abs(np.mean(y == 0) - applied_rate(0.3)) < _tolerance(0.3, N)


def test_every_dropout_in_the_model_is_this_one():
    config = ModelConfig(num_layers=1, d_model=16, d_ff=32, num_heads=2, vocab_size=30, max_length=16,
                         attention_dropout=0.1, inner_dropout=0.1)
    model = build_transformer(config)
    dropouts = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout)]
    # Embeddings (2), encoder (2 residual, attention, inner), decoder (3 residual, 2 attention, inner).
    assert len(dropouts) == 12
    assert all(type(layer) is Dropout for layer in dropouts)


JAX_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from layers.dropout import Dropout, applied_rate
    y = np.asarray(Dropout(0.1, seed=3)(np.ones([1 << 20], "float32"), training=True))
    print(float(np.mean(y == 0)), float(y.max()))
    """
)


def test_under_jax_the_rate_and_scale_are_the_same():
    pytest.importorskip("jax")
    environment = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT}
    output = subprocess.run([sys.executable, "-c", JAX_SCRIPT], env=environment, cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    dropped, largest = map(float, output.split())
    assert abs(dropped - applied_rate(0.1)) < _tolerance(0.1, N)
    assert largest == _scale(0.1)
