"""Interrupts (`app.training.interrupts`): Ctrl-C and SIGTERM save a checkpoint and stop,
at a step all workers agree on, counting a step cut short."""

import os
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from app.model_dir import checkpoints
from app.training import interrupts
from app.training import loop as training
from tests.training.helpers import checkpoint_weights, run_training


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_before_exiting(small_data, tmp_path):
    def press_ctrl_c(transformer):
        os.kill(os.getpid(), signal.SIGINT)
        return {}

    with pytest.raises(KeyboardInterrupt):
        run_training(small_data, tmp_path, evaluate_fn=press_ctrl_c, eval_every=2, checkpoint_every=100)
    assert checkpoints.checkpoint_paths(tmp_path)[-1].endswith("ckpt-2")


@pytest.mark.slow
def test_a_second_ctrl_c_during_a_step_counts_that_step_before_saving(small_data, tmp_path, monkeypatch):
    # The second signal raises as soon as Python runs again: after step 3's update and
    # before the loop read it. The checkpoint was ckpt-2 holding step 3's weights, and
    # the resumed run trained step 3's batch again.
    uninterrupted = run_training(small_data, tmp_path / "straight", checkpoint_every=3)
    make_train_steps = training.make_train_steps

    def make_step_pressed_twice_at_step_3(*args, **kwargs):
        train_steps, calls = make_train_steps(*args, **kwargs), []

        def pressed(iterator, count):  # one update a call
            result = train_steps(iterator, count)
            calls.append(len(calls) + 1)
            if calls[-1] == 3:
                os.kill(os.getpid(), signal.SIGINT)  # the first: a flag, read after the step
                os.kill(os.getpid(), signal.SIGINT)  # the second raises here
            return result

        return pressed

    monkeypatch.setattr(training, "make_train_steps", make_step_pressed_twice_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        run_training(small_data, tmp_path / "pressed", checkpoint_every=100)
    monkeypatch.undo()
    saved = checkpoints.checkpoint_paths(tmp_path / "pressed")
    assert [os.path.basename(path) for path in saved] == ["ckpt-3"]
    assert tf.train.load_checkpoint(saved[0]).get_tensor("progress/step/.ATTRIBUTES/VARIABLE_VALUE") == 3
    expected = checkpoint_weights(checkpoints.checkpoint_paths(tmp_path / "straight")[0])  # ckpt-3
    for name, value in checkpoint_weights(saved[0]).items():
        np.testing.assert_allclose(value, expected[name], atol=1e-6)
    resumed = run_training(small_data, tmp_path / "pressed", checkpoint_every=3)
    assert resumed["step"] == uninterrupted["step"] == 6
    expected = checkpoint_weights(uninterrupted["checkpoint"])
    for name, value in checkpoint_weights(resumed["checkpoint"]).items():
        np.testing.assert_allclose(value, expected[name], atol=1e-6)


def assert_kept_as_in(model_dir, uninterrupted_dir):
    """`model_dir` keeps the files of `uninterrupted_dir`'s checkpoints, none besides (those
    removed leave none behind), and the same weights in each."""
    assert sorted(os.listdir(model_dir / "checkpoints")) == sorted(os.listdir(uninterrupted_dir / "checkpoints"))
    for expected_path, actual_path in zip(
        checkpoints.checkpoint_paths(uninterrupted_dir), checkpoints.checkpoint_paths(model_dir), strict=True
    ):
        expected = checkpoint_weights(expected_path)
        for name, value in checkpoint_weights(actual_path).items():
            np.testing.assert_allclose(value, expected[name], atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_checkpoints_saved_on_interrupts_give_way_to_the_next_and_push_out_none(small_data, tmp_path):
    # Each interrupt saves a checkpoint off the cadence of 2, so that the run resumes where
    # it stopped. It used to stay, and to count among the 3 kept: the newest 3 then held
    # ckpt-7 in place of ckpt-4, and export averaged other weights than an uninterrupted run.
    keep = dict(train_steps=8, checkpoint_every=2, keep_checkpoints=3, eval_every=1)
    uninterrupted = run_training(small_data, tmp_path / "straight", evaluate_fn=lambda transformer: {}, **keep)

    def press_ctrl_c_on_evaluation(number):
        calls = []

        def evaluate(transformer):
            calls.append(transformer)
            if len(calls) == number:
                os.kill(os.getpid(), signal.SIGINT)
            return {}

        return evaluate

    def kept():
        return [os.path.basename(path) for path in checkpoints.checkpoint_paths(tmp_path / "pressed")]

    # Stopped after steps 3, 5 and 7, each time resumed from the checkpoint the last saved;
    # every step is evaluated, so the k-th evaluation after resuming at r is step r + k.
    for stop, resumed_from, expected in ((3, 0, ["ckpt-2", "ckpt-3"]), (5, 3, ["ckpt-2", "ckpt-4", "ckpt-5"]),
                                         (7, 5, ["ckpt-2", "ckpt-4", "ckpt-6", "ckpt-7"])):
        with pytest.raises(KeyboardInterrupt):
            run_training(
                small_data, tmp_path / "pressed", evaluate_fn=press_ctrl_c_on_evaluation(stop - resumed_from), **keep
            )
        assert kept() == expected
        newest = tf.train.load_checkpoint(checkpoints.checkpoint_paths(tmp_path / "pressed")[-1])
        assert newest.get_tensor("progress/saved_on_interrupt/.ATTRIBUTES/VARIABLE_VALUE") == 1
    resumed = run_training(small_data, tmp_path / "pressed", evaluate_fn=lambda transformer: {}, **keep)

    assert resumed["step"] == uninterrupted["step"] == 8
    assert kept() == ["ckpt-4", "ckpt-6", "ckpt-8"]
    assert_kept_as_in(tmp_path / "pressed", tmp_path / "straight")


@pytest.mark.slow
def test_a_checkpoint_saved_on_an_interrupt_after_the_last_step_becomes_the_final_one(
    small_data, tmp_path, monkeypatch
):
    # Ctrl-C during step 7 of 7, off the cadence of 2: the run stops with a checkpoint saved
    # on the interrupt, and its resume, with no step left, saves step 7 as its final one.
    keep = dict(train_steps=7, checkpoint_every=2, keep_checkpoints=3)
    run_training(small_data, tmp_path / "straight", **keep)
    make_train_steps = training.make_train_steps

    def make_step_pressed_at_step_7(*args, **kwargs):
        train_steps, calls = make_train_steps(*args, **kwargs), []

        def pressed(iterator, count):  # one update a call
            calls.append(len(calls) + 1)
            if calls[-1] == 7:
                os.kill(os.getpid(), signal.SIGINT)  # a flag, read after the step
            return train_steps(iterator, count)

        return pressed

    monkeypatch.setattr(training, "make_train_steps", make_step_pressed_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        run_training(small_data, tmp_path / "pressed", **keep)
    monkeypatch.undo()
    kept = checkpoints.checkpoint_paths(tmp_path / "pressed")
    assert [os.path.basename(path) for path in kept] == ["ckpt-2", "ckpt-4", "ckpt-6", "ckpt-7"]
    flag = "progress/saved_on_interrupt/.ATTRIBUTES/VARIABLE_VALUE"
    assert tf.train.load_checkpoint(kept[-1]).get_tensor(flag) == 1

    resumed = run_training(small_data, tmp_path / "pressed", **keep)
    assert resumed["step"] == 7
    kept = checkpoints.checkpoint_paths(tmp_path / "pressed")
    # The final checkpoint, written again unmarked: a later, longer run keeps it as it would
    # an uninterrupted run's; and the sweep keeps the 3 an uninterrupted run keeps.
    assert [os.path.basename(path) for path in kept] == ["ckpt-4", "ckpt-6", "ckpt-7"]
    assert tf.train.load_checkpoint(kept[-1]).get_tensor(flag) == 0
    assert_kept_as_in(tmp_path / "pressed", tmp_path / "straight")


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_before_exiting_and_leaves_the_handler_as_it_was(small_data, tmp_path):
    # How a job scheduler (or `kill`) stops a run; Python's default would end it at once.
    class TerminatedUnsaved(Exception):
        pass

    def terminate_unsaved(signum, frame):
        raise TerminatedUnsaved

    def send_sigterm(transformer):
        os.kill(os.getpid(), signal.SIGTERM)
        return {}

    previous = signal.signal(signal.SIGTERM, terminate_unsaved)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_training(small_data, tmp_path, evaluate_fn=send_sigterm, eval_every=2, checkpoint_every=100)
        assert signal.getsignal(signal.SIGTERM) is terminate_unsaved
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert checkpoints.checkpoint_paths(tmp_path)[-1].endswith("ckpt-2")


@pytest.mark.slow
def test_a_sigterm_while_saving_for_another_workers_signal_lets_the_save_end(small_data, tmp_path, monkeypatch):
    # Multi-worker: another worker's signal stops this one after step 2, and this one's own
    # SIGTERM comes as it saves. The run's flag takes it; the handler from before the run
    # (Python's own ends the process) would cut short a save the other workers take part in.
    class TerminatedUnsaved(Exception):
        pass

    def terminate_unsaved(signum, frame):
        raise TerminatedUnsaved

    def stop_for_another_workers_signal(strategy, interrupted, step, clock):
        return lambda step, last=False: step == 2

    monkeypatch.setattr(training, "stop_check", stop_for_another_workers_signal)
    save = checkpoints.CheckpointTracker.save

    def save_receiving_sigterm(tracker, step, on_interrupt=False):
        os.kill(os.getpid(), signal.SIGTERM)
        return save(tracker, step, on_interrupt)

    monkeypatch.setattr(checkpoints.CheckpointTracker, "save", save_receiving_sigterm)
    previous = signal.signal(signal.SIGTERM, terminate_unsaved)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_training(small_data, tmp_path, checkpoint_every=100)
        assert signal.getsignal(signal.SIGTERM) is terminate_unsaved
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert checkpoints.checkpoint_paths(tmp_path)[-1].endswith("ckpt-2")


def test_one_process_reads_its_flag_after_every_step_without_a_collective(monkeypatch):
    monkeypatch.setattr(interrupts, "max_over_workers", None)  # Not to be called.
    interrupted = interrupts.InterruptFlag()
    for strategy in (tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(["/cpu:0"])):
        stop_requested = interrupts.stop_check(strategy, interrupted, 0, time.monotonic)
        interrupted.raised = False
        assert [stop_requested(1), stop_requested(2)] == [False, False]
        interrupted.raised = True
        assert stop_requested(3) is True


def test_workers_reduce_their_flags_about_once_a_second_of_the_slowest_and_at_the_last_step():
    interrupted = interrupts.InterruptFlag()
    now = [100.0]
    reduced = []

    def over_workers(values):  # [flag, seconds per step]; the other worker is twice as slow
        reduced.append(values)
        return [values[0], 2 * values[1]]

    stop_requested = interrupts.AgreedStop(interrupted, over_workers, 10, lambda: now[0])
    answers = []
    for step in range(11, 21):
        now[0] += 0.125  # 8 steps a second here, 4 on the slowest worker: 4 steps between reductions
        interrupted.raised = step >= 16
        answers.append(stop_requested(step, last=step == 20))
    # Reduced after steps 11 (the first), 15, 19 and 20 (the last).
    assert reduced == [[0.0, 0.125], [0.0, 0.125], [1.0, 0.125], [1.0, 0.125]]
    assert answers == [False] * 8 + [True, True]


# ---------------------------------------------------------------------------------------
# The flag and the step under way on their own.


def test_the_first_signal_raises_the_flag_the_second_interrupts_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    flag = interrupts.InterruptFlag()
    with flag:
        assert not flag.raised
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.raised
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
