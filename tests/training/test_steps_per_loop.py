"""Several updates per call of the training function (`--steps-per-loop`): the same run as
one update a call, with every record, evaluation and checkpoint at the same step."""

import json
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from app.model_dir import checkpoints
from app.training import loop as training
from app.training.config import TrainConfig
from tests.training.helpers import checkpoint_weights, run_training

POSITION = ("step", "epoch", "batch_in_epoch")


class Watched:
    """A run's calls of the training function, `(count asked, updates made)` each, and what
    each checkpoint held when it was saved: `(name, step, epoch, batch_in_epoch)`, weights."""

    def __init__(self, monkeypatch, press=None):
        """`press(call, when)`, if given, runs before ("before") and after ("after") each call."""
        self.calls, self.saved, self.weights = [], [], {}
        make_train_steps, save = training.make_train_steps, checkpoints.CheckpointTracker.save

        def make_watched_steps(*args, **kwargs):
            train_steps = make_train_steps(*args, **kwargs)

            def watched(iterator, count):
                press and press(len(self.calls) + 1, "before")
                results = train_steps(iterator, count)
                self.calls.append((int(count), int(results[0].shape[0])))
                press and press(len(self.calls), "after")
                return results

            return watched

        def watched_save(tracker, step, on_interrupt=False):
            path = save(tracker, step, on_interrupt)
            # Read as saved: older checkpoints need not keep all they held.
            reader = tf.train.load_checkpoint(path)
            position = [int(reader.get_tensor(f"progress/{name}/.ATTRIBUTES/VARIABLE_VALUE")) for name in POSITION]
            self.saved.append((os.path.basename(path), *position))
            self.weights[os.path.basename(path)] = checkpoint_weights(path)
            return path

        monkeypatch.setattr(training, "make_train_steps", make_watched_steps)
        monkeypatch.setattr(checkpoints.CheckpointTracker, "save", watched_save)


def records(model_dir):
    """metrics.jsonl without its speeds, which no two runs share."""
    lines = map(json.loads, open(os.path.join(model_dir, "metrics.jsonl")))
    return [{k: v for k, v in record.items() if k != "tokens_per_second"} for record in lines]


def assert_same_weights(actual, expected):
    assert actual.keys() == expected.keys() and expected
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


# 33 batches an epoch in small_data: accumulating 2 a step, epoch 0 ends after step 16, and
# 1 batch is left over. Cadences none of which is a multiple of 4, nor the run's length.
# Each call ends at the next record, evaluation, checkpoint or end, or where the epoch does.
RUNS = {
    "one batch a step": (
        dict(accumulate=1, train_steps=37, log_every=10, eval_every=15, checkpoint_every=9),
        [(4, 4), (4, 4), (1, 1), (1, 1), (4, 4), (1, 1), (3, 3), (2, 2), (4, 4), (3, 3), (3, 3),
         (4, 3), (3, 3), (1, 1)],
    ),
    "two batches a step": (
        dict(accumulate=2, train_steps=19, log_every=3, eval_every=5, checkpoint_every=7),
        [(3, 3), (2, 2), (1, 1), (1, 1), (2, 2), (1, 1), (2, 2), (2, 2), (1, 1), (3, 1), (2, 2), (1, 1)],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_four_updates_a_call_train_records_and_checkpoint_exactly_as_one(small_data, tmp_path, monkeypatch, name):
    flags, calls = RUNS[name]
    runs = {}
    for steps_per_loop in (1, 4):
        watched = Watched(monkeypatch)
        model_dir = tmp_path / str(steps_per_loop)
        result = run_training(small_data, model_dir, steps_per_loop=steps_per_loop, keep_checkpoints=10, **flags)
        runs[steps_per_loop] = watched, result, records(model_dir)
        monkeypatch.undo()
    (one, one_result, one_records), (four, four_result, four_records) = runs[1], runs[4]

    assert four.calls == calls
    # One update a call, and a call with none where the epoch ran out exactly at its end.
    assert {count for count, _ in one.calls} == {1} and sum(made for _, made in one.calls) == flags["train_steps"]
    assert four_result["step"] == one_result["step"] == flags["train_steps"]
    assert four_result["loss"] == one_result["loss"]
    assert four_records == one_records
    assert [r["step"] for r in four_records if "loss" in r] == [
        *range(flags["log_every"], flags["train_steps"], flags["log_every"]), flags["train_steps"]
    ]
    assert [r["epoch"] for r in four_records if "loss" in r][-1] == 1
    # The same checkpoints at the same steps, each with the same data position and weights.
    assert four.saved == one.saved
    every = flags["checkpoint_every"]
    assert [saved[1] for saved in four.saved] == [*range(every, flags["train_steps"], every), flags["train_steps"]]
    for name in four.weights:
        assert_same_weights(four.weights[name], one.weights[name])


INTERRUPTED = dict(train_steps=10, log_every=5, checkpoint_every=100, steps_per_loop=4)


@pytest.fixture(scope="module")
def uninterrupted(small_data, tmp_path_factory):
    """`(model_dir, Watched)` of the run that `INTERRUPTED` flags make, uninterrupted."""
    model_dir = tmp_path_factory.mktemp("straight")
    with pytest.MonkeyPatch.context() as monkeypatch:
        watched = Watched(monkeypatch)
        assert run_training(small_data, model_dir, **INTERRUPTED)["step"] == 10
    return model_dir, watched


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_an_interrupt_during_a_call_stops_at_its_end_and_the_run_resumes_to_the_same_weights(
    small_data, tmp_path, monkeypatch, uninterrupted, presses
):
    # Calls make steps 1-4, 5, 6-9 and 10. Ctrl-C during the third: the first press is a
    # flag the loop reads after the call; a second raises as soon as Python runs again, after
    # the call's 4 updates and before the loop has read them. Either way the checkpoint
    # holds step 9, its weights and its data position, and the run resumes from there.
    flags, (straight_dir, straight) = INTERRUPTED, uninterrupted

    def press_ctrl_c(call, when):
        if call == 3 and when == ("before" if presses == 1 else "after"):
            for _ in range(presses):
                os.kill(os.getpid(), signal.SIGINT)

    pressed = Watched(monkeypatch, press_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_training(small_data, tmp_path / "pressed", **flags)
    monkeypatch.undo()
    assert pressed.calls == [(4, 4), (1, 1), (4, 4)]
    assert pressed.saved == [("ckpt-9", 9, 0, 9)]

    resumed = Watched(monkeypatch)
    result = run_training(small_data, tmp_path / "pressed", **flags)
    assert resumed.calls == [(1, 1)]
    assert result["step"] == 10
    assert straight.saved == resumed.saved == [("ckpt-10", 10, 0, 10)]
    assert_same_weights(resumed.weights["ckpt-10"], straight.weights["ckpt-10"])
    # The record of step 10 after resuming covers step 10 alone: its steps and rates only.
    assert [(r["step"], r.get("learning_rate")) for r in records(tmp_path / "pressed")] == [
        (r["step"], r.get("learning_rate")) for r in records(straight_dir)
    ]


@pytest.mark.parametrize("bad", [0, -2, 2.0, "4", True])
def test_steps_per_loop_must_be_a_positive_integer_and_a_bad_one_is_named(bad):
    with pytest.raises(ValueError, match=f"steps_per_loop must be a positive integer, got {bad!r}"):
        TrainConfig(train_steps=10, steps_per_loop=bad)
