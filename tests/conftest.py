"""Shared test setup: quiet TensorFlow, the TensorFlow backend for Keras, fixed seeds."""

import os

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
