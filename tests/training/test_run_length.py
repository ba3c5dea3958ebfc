"""The run's length in steps (`app.training.run_length`)."""


import pytest

from app.training.config import TrainConfig
from app.training.run_length import run_length


def test_the_run_length_needs_an_epoch_of_at_least_one_update(small_data):
    batches = len(small_data.train_plan(0, 3))
    assert run_length(TrainConfig(epochs=2, seed=3), small_data) == 2 * batches
    assert run_length(TrainConfig(epochs=2, train_steps=5, accumulate=2, seed=3), small_data) == 5
    too_many = TrainConfig(train_steps=1, accumulate=batches + 1, seed=3)
    with pytest.raises(ValueError, match=f"makes {batches} batches per epoch, fewer than --accumulate {batches + 1}"):
        run_length(too_many, small_data)
