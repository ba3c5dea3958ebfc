"""Shared test setup: quiet TensorFlow, the TensorFlow backend for Keras, fixed seeds, and
one small exported translator for the export and serving tests."""

import os
import tempfile

# Set before TensorFlow or Keras is imported anywhere in the test session.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Trained vocabularies are cached (data/vocabulary_cache.py): in a directory of this test
# process, never the user's ~/.cache.
os.environ["TRANSFORMER_VOCAB_CACHE"] = tempfile.mkdtemp(prefix="vocab-cache-")

# TensorFlow's start-up lines ignore TF_CPP_MIN_LOG_LEVEL. One pytest process hides them in
# its capture of collection, but pytest-xdist's workers would print them after the summary.
from app.cli.quiet_tensorflow import import_tensorflow  # noqa: E402

import_tensorflow()

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same random state, so failures reproduce."""
    keras.utils.set_random_seed(1234)
    yield


# A slice of Multi30k, for the training tests.


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """300 training and 40 validation pairs of Multi30k en-de, as plain files."""
    from tests.tiny_run import write_multi30k_slice

    return write_multi30k_slice(tmp_path_factory.mktemp("corpus"), train=300, validation=40)


@pytest.fixture(scope="module")
def small_data(small_corpus, tmp_path_factory):
    """`small_corpus` prepared: a 400-piece vocabulary, batches of 512 tokens."""
    from data.config import DataConfig
    from data.dataset import prepare_data

    config = DataConfig(dataset="files:" + ",".join(small_corpus), vocab_size=400, batch_tokens=512, max_length=64)
    return prepare_data(config, str(tmp_path_factory.mktemp("vocab")))


# A small exported translator, shared by the export and serving tests.

SENTENCES = [
    "A man rides a bike.",
    "",
    "   ",
    "Zwei Hunde spielen im Schnee, und ein Kind sieht zu.",
    "Ein Mann 🚲 fährt Fahrrad — 東京 Москва",
    " ".join(["dog"] * 80),  # longer than the model's 48 positions
]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A real (four-step) training run of a small model, with settings and vocabulary."""
    from tests.tiny_run import train_tiny_run

    return train_tiny_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def exported(model_dir, tmp_path_factory):
    """`(translator, base, path of version 1, its in-memory outputs for SENTENCES)`.

    test_export.py adds version 2 to `base`; tests that serve a base of their own copy `path`.
    """
    import tensorflow as tf

    from app.export.saved_model import export, load_translator

    base = str(tmp_path_factory.mktemp("exports") / "translator")
    translator, _ = load_translator(model_dir)
    path = export(translator, base)
    expected = translator.serve(tf.constant(SENTENCES))
    return translator, base, path, {k: v.numpy() for k, v in expected.items()}
