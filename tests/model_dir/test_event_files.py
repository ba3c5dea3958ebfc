"""app.model_dir.event_files: a resumed run's TensorBoard files lose the steps it trains again."""

import os

import pytest
import tensorflow as tf
from tensorflow.core.util import event_pb2

from app.model_dir.event_files import drop_events_after


def write_losses(directory, steps):
    """An event file of one `loss` scalar per step, as training writes them; its path."""
    writer = tf.summary.create_file_writer(str(directory))
    with writer.as_default():
        for step in steps:
            tf.summary.scalar("loss", float(step), step=step)
    writer.close()
    (path,) = [p for p in directory.iterdir() if "tfevents" in p.name]
    return path


def loss_steps(path):
    events = map(event_pb2.Event.FromString, tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    return [event.step for event in events if any(value.tag == "loss" for value in event.summary.value)]


def test_events_after_the_step_are_dropped_and_the_rest_kept_as_they_were(tmp_path):
    path = write_losses(tmp_path, range(1, 9))
    before = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())

    assert drop_events_after(str(tmp_path), 5) == 3
    assert loss_steps(path) == [1, 2, 3, 4, 5]
    # The file's first event (its version, step 0) and the kept ones, byte for byte.
    assert list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator()) == before[:6]
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left


def test_a_file_with_nothing_to_drop_is_not_rewritten(tmp_path):
    path = write_losses(tmp_path, range(1, 4))
    os.utime(path, (1, 1))
    assert drop_events_after(str(tmp_path), 3) == 0
    assert os.stat(path).st_mtime == 1


def test_a_last_event_cut_off_mid_write_is_dropped(tmp_path):
    path = write_losses(tmp_path, range(1, 5))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 3)

    assert drop_events_after(str(tmp_path), 10) == 1
    assert loss_steps(path) == [1, 2, 3]


def test_a_failed_rewrite_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = write_losses(tmp_path, range(1, 5))
    before = path.read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        drop_events_after(str(tmp_path), 2)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_a_directory_without_event_files_is_left_alone(tmp_path):
    assert drop_events_after(str(tmp_path / "train"), 3) == 0
    assert not (tmp_path / "train").exists()
