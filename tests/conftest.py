"""Shared test setup: quiet TensorFlow, the TensorFlow backend for Keras, fixed seeds, and
one small exported translator for the export and serving tests, built once per run."""

import hashlib
import os
import tempfile
from pathlib import Path

# Set before TensorFlow or Keras is imported anywhere in the test session.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Trained vocabularies are cached (data/vocabulary_cache.py): in a directory of this test
# process, never the user's ~/.cache.
os.environ["TRANSFORMER_VOCAB_CACHE"] = tempfile.mkdtemp(prefix="vocab-cache-")

# TensorFlow's start-up lines ignore TF_CPP_MIN_LOG_LEVEL. One pytest process hides them in
# its capture of collection, but pytest-xdist's workers would print them after the summary.
from app.runtime.quiet_tensorflow import import_tensorflow  # noqa: E402

import_tensorflow()

import keras  # noqa: E402
import pytest  # noqa: E402

from tests.built_once import built_once  # noqa: E402
# The two tiers' hooks (tests/tiers.py): the bound on unmarked tests, the files' order.
from tests.tiers import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: E402, F401


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
    """A real (four-step) training run of a small model, with settings and vocabulary.

    Shared by every test of the run: a test that writes into it copies it first.
    """
    from tests.tiny_run import train_tiny_run

    return built_once(tmp_path_factory, "run", train_tiny_run)


@pytest.fixture(scope="session")
def exported(model_dir, tmp_path_factory):
    """`(translator, base, path of version 1, its in-memory outputs for SENTENCES)`.

    The export is shared by every test of the run and none writes into `base`: tests that
    serve a base of their own copy `path`. The translator is this process's own, with the
    exported weights (the best checkpoint).

    Its warm-up requests call `serving_default` only: a worker loads this export in many
    tests, and the other seven signatures' first calls took 2-6 s each there, which a test
    that calls one pays when it calls it. tests/serving/test_warmup.py warms every one.
    """
    import tensorflow as tf

    from app.export.saved_model import export, load_translator

    translator, _ = load_translator(model_dir)

    def export_and_translate(directory):
        base = str(directory / "translator")
        path = export(translator, base, warmup_signatures=["serving_default"])
        expected = translator.serve(tf.constant(SENTENCES))
        return base, path, {k: v.numpy() for k, v in expected.items()}

    base, path, expected = built_once(tmp_path_factory, "exports", export_and_translate)
    return translator, base, path, expected


@pytest.fixture(scope="session")
def stand_in_export(tmp_path_factory):
    """The path of version 1 of the stand-in translator (tests/stand_in.py): for tests of what
    loads, serves and ends versions rather than of what they translate. A process loads and
    warms it up in a fraction of a second, the tiny model's in about 10 s."""
    from app.export.saved_model import export
    from tests.stand_in import StandInTranslator

    return export(StandInTranslator(), str(tmp_path_factory.mktemp("stand_in") / "translator"))


@pytest.fixture(scope="session")
def tiny_server(exported, model_dir, tmp_path_factory):
    """A `python -m app.serve` of a copy of `exported` (tests/serving/server_process.py), for
    tests that only send it requests: started once per test process, as it loads the tiny
    model in its worker process (about 10 s of CPU). Session-scoped, not module-scoped:
    pytest-xdist hands a worker tests of several modules in turn, and a module's fixtures
    were set up again each time its tests came back."""
    from tests.serving.server_process import start_tiny_server

    server = start_tiny_server(exported, model_dir, tmp_path_factory)
    yield server
    server.stop()


# SavedModels loaded once per test process.

_LOADED = {}


def _export_key(path, args, kwargs):
    """A digest of what `tf.saved_model.load(path, *args, **kwargs)` reads: every file under
    `path` but export_info.json, the project's own file beside the SavedModel (tests rewrite it
    between command runs), and the arguments."""
    digest = hashlib.sha256(repr((args, sorted(kwargs.items()))).encode())
    for file in sorted(Path(path).rglob("*")):
        if file.is_file() and file.name != "export_info.json":
            digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def load_each_export_once():
    """`tf.saved_model.load`, for the tests of a module that use this, remembers what it loaded
    by content, for the rest of the process: each command run of these tests would otherwise
    load the same export again (about 6 s of CPU, the slowest part of a short run), and so
    would each module. A loaded SavedModel is read, never changed, by the code under test."""
    import tensorflow as tf

    load = tf.saved_model.load

    def load_once(path, *args, **kwargs):
        key = _export_key(path, args, kwargs) if os.path.isdir(path) else None
        if key is None:
            return load(path, *args, **kwargs)  # its own error
        if key not in _LOADED:
            _LOADED[key] = load(path, *args, **kwargs)
        return _LOADED[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.saved_model, "load", load_once)
        yield
