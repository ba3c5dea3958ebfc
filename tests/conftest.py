"""Shared test setup: quiet TensorFlow, the TensorFlow backend for Keras, fixed seeds, and
one small exported translator for the export and serving tests."""

import gzip
import os
from pathlib import Path

# Set before TensorFlow or Keras is imported anywhere in the test session.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same random state, so failures reproduce."""
    keras.utils.set_random_seed(1234)
    yield


# A small exported translator, shared by the export and serving tests.

ROOT = Path(__file__).resolve().parents[1]
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
    """A real (two-step) training run of a small model, with settings and vocabulary."""
    import tensorflow as tf

    from app.config import ModelConfig
    from app.train_command import save_settings
    from app.training import TrainConfig, train
    from data.config import DataConfig
    from data.dataset import prepare_data

    directory = tmp_path_factory.mktemp("run")
    corpus = []
    for split, count in (("train", 300), ("val", 20)):
        for lang in ("en", "de"):
            with gzip.open(ROOT / "data" / "multi30k" / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                path = directory / f"{split}.{lang}"
                path.write_text("".join(next(f) for _ in range(count)), encoding="utf-8")
                corpus.append(str(path))
    data_config = DataConfig(dataset="files:" + ",".join(corpus), vocab_size=400, batch_tokens=512, max_length=48)
    data = prepare_data(data_config, str(directory))
    model_config = ModelConfig.from_size(
        "tiny", vocab_size=data.tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2, max_length=48
    )
    train_config = TrainConfig(train_steps=4, eval_every=0, checkpoint_every=1, log_every=1, keep_checkpoints=3)
    save_settings(str(directory), model_config, data_config, train_config)
    train(model_config, data, train_config, str(directory), tf.distribute.get_strategy(), log=lambda *_: None)
    return str(directory)


@pytest.fixture(scope="session")
def exported(model_dir, tmp_path_factory):
    """`(translator, base, path of version 1, its in-memory outputs for SENTENCES)`.

    test_export.py adds version 2 to `base`; tests that serve a base of their own copy `path`.
    """
    import tensorflow as tf

    from app.export import export, load_translator

    base = str(tmp_path_factory.mktemp("exports") / "translator")
    translator, _ = load_translator(model_dir)
    path = export(translator, base)
    expected = translator.serve(tf.constant(SENTENCES))
    return translator, base, path, {k: v.numpy() for k, v in expected.items()}
