"""Checkpoints (`app.model_dir.checkpoints`): averaging, restoring weights into a model of
the same configuration, and older checkpoints."""

import dataclasses
import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from app.model_dir import checkpoints
from app.training.config import TrainConfig
from data.config import DataConfig


def test_averaging_checkpoints_gives_the_mean_of_their_weights(tmp_path):
    model = build_transformer(
        ModelConfig.from_size("tiny", vocab_size=20, num_layers=1, d_model=8, d_ff=16, num_heads=2)
    )
    weights = checkpoints.named_weights(model)
    saver = tf.train.Checkpoint(weights=weights)
    paths = []
    for value in (1.0, 2.0, 6.0):
        for variable in weights.values():
            variable.assign(np.full(variable.shape, value, "float32"))
        paths.append(saver.write(str(tmp_path / f"ckpt-{int(value)}")))
    for variable in weights.values():
        variable.assign(np.zeros(variable.shape, "float32"))
    checkpoints.average_checkpoints(model, paths)
    for variable in model.weights:
        np.testing.assert_allclose(np.asarray(variable), 3.0)


def test_weights_restore_only_into_a_model_of_the_checkpoints_configuration(tmp_path):
    from app.model_dir.settings import load_settings, save_settings

    def model_of(config):
        keras.utils.set_random_seed(0)
        return build_transformer(config)

    with_biases = ModelConfig.from_size("tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                                        max_length=16, attention_bias=True)
    saved = model_of(with_biases)
    path = tf.train.Checkpoint(weights=checkpoints.named_weights(saved)).write(str(tmp_path / "ckpt"))
    assert checkpoints.saved_weight_paths(path) == set(checkpoints.named_weights(saved))
    assert "encoder_layer_0/self_attention/query/bias" in checkpoints.saved_weight_paths(path)

    # A settings.json written before attention_bias existed reads as with biases, so its
    # checkpoints restore, weight for weight.
    save_settings(str(tmp_path), with_biases, DataConfig(batch_tokens=512), TrainConfig(train_steps=1))
    settings = json.loads((tmp_path / "settings.json").read_text())
    del settings["model"]["attention_bias"]
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    restored = model_of(load_settings(str(tmp_path))[0])
    for weight in restored.weights:
        weight.assign(np.zeros(weight.shape, weight.dtype))
    checkpoints.restore_weights(restored, path)
    for ours, theirs in zip(restored.weights, saved.weights):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))

    # Without biases, the model has no place for 12 of the checkpoint's weights (3
    # attentions, 4 projections each): an error naming them, not a model silently without.
    without_biases = model_of(dataclasses.replace(with_biases, attention_bias=False))
    with pytest.raises(
        ValueError,
        match=r"holds 12 weight\(s\) the model has none for \(decoder_layer_0/cross_attention/attention_output/bias, ",
    ):
        checkpoints.restore_weights(without_biases, path)
    # The other way round, the model's 12 biases are missing from the checkpoint.
    other_path = tf.train.Checkpoint(weights=checkpoints.named_weights(without_biases)).write(str(tmp_path / "other"))
    with pytest.raises(
        ValueError,
        match=r"lacks 12 weight\(s\) the model has \(decoder_layer_0/cross_attention/attention_output/bias, ",
    ):
        checkpoints.restore_weights(model_of(with_biases), other_path)


def _dense_model_and_optimizer():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    return model, optimizer


def test_a_checkpoint_older_than_a_progress_field_resumes_with_that_field_at_its_initial_value(tmp_path):
    # A run checkpointed before Progress kept its wall-clock seconds and its plan, resumed
    # after an upgrade: what the checkpoint holds is restored, the rest starts afresh.
    model, optimizer = _dense_model_and_optimizer()
    old_progress = tf.Module(name="progress")
    old_progress.step = tf.Variable(7, dtype=tf.int64)
    old_progress.epoch = tf.Variable(2, dtype=tf.int64)
    old_progress.batch_in_epoch = tf.Variable(5, dtype=tf.int64)
    old = tf.train.Checkpoint(weights=checkpoints.named_weights(model), optimizer=optimizer, progress=old_progress)
    tf.train.CheckpointManager(old, str(tmp_path / "checkpoints"), max_to_keep=1).save(checkpoint_number=7)
    saved_kernel = model.weights[0].numpy()

    model, optimizer = _dense_model_and_optimizer()
    progress = checkpoints.Progress(planned_steps=100, cooldown_steps=20)
    tracker = checkpoints.CheckpointTracker(str(tmp_path), model, optimizer, progress)
    assert tracker.restore_latest() == str(tmp_path / "checkpoints" / "ckpt-7")
    assert [int(progress.step), int(progress.epoch), int(progress.batch_in_epoch)] == [7, 2, 5]
    assert [int(progress.planned_steps), int(progress.cooldown_steps), float(progress.seconds)] == [100, 20, 0.0]
    np.testing.assert_array_equal(model.weights[0].numpy(), saved_kernel)


# Weights-only checkpoints for averaging, the newest whole, and the random generators' state.


def _model_with_dropout_and_optimizer():
    from layers.dropout import Dropout

    # Named: the weights' paths, which checkpoints key them by, are then the same in every model.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense"), Dropout(0.5)], name="model")
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _tracker(model_dir, keep=3):
    """A tracker of a 3 -> 2 dense model with a dropout, its model and its progress."""
    model, optimizer = _model_with_dropout_and_optimizer()
    progress = checkpoints.Progress()
    return checkpoints.CheckpointTracker(str(model_dir), model, optimizer, progress, keep=keep), model, progress


def _save_with_weights(run, step, on_interrupt=False):
    """Saves checkpoint `step` of `run` (a `_tracker`) with every weight set to `step` + 0.25
    and one dropout draw made."""
    tracker, model, progress = run
    for variable in model.weights:
        variable.assign(np.full(variable.shape, step + 0.25, "float32"))
    model(np.ones((1, 3), "float32"), training=True)  # advances the dropout's generator
    progress.step.assign(step)
    return tracker.save(step, on_interrupt)


def _parts(path):
    """The top-level objects checkpoint `path` holds."""
    return {name.split("/")[0] for name, _ in tf.train.list_variables(path)} - {"_CHECKPOINTABLE_OBJECT_GRAPH"}


def _checkpoint_files(model_dir):
    return sorted(name for name in os.listdir(model_dir / "checkpoints") if name != "checkpoint")


def test_only_the_newest_checkpoint_holds_more_than_weights_and_averaging_reads_the_others_as_before(tmp_path):
    tracker, model, _ = run = _tracker(tmp_path)
    whole = tmp_path / "whole"  # each checkpoint as saved, before a newer one made it weights-only
    whole.mkdir()
    for step in range(1, 5):
        path = _save_with_weights(run, step)
        assert _parts(path) == {"weights", "optimizer", "progress", "random", "save_counter"}
        for name in os.listdir(tmp_path / "checkpoints"):
            if name.startswith(f"ckpt-{step}.") and not name.startswith(f"ckpt-{step}.weights"):
                shutil.copy(tmp_path / "checkpoints" / name, whole / name)

    kept = checkpoints.checkpoint_paths(tmp_path)
    assert [os.path.basename(path) for path in kept] == ["ckpt-2", "ckpt-3", "ckpt-4"]
    assert [_parts(path) for path in kept[:-1]] == [{"weights"}, {"weights"}]
    assert _parts(kept[-1]) == {"weights", "optimizer", "progress", "random", "save_counter"}
    # The newest's weights alone wait beside it; nothing else is left of those no longer kept.
    assert _checkpoint_files(tmp_path) == [
        f"ckpt-{name}.{part}" for name in ("2", "3", "4", "4.weights") for part in ("data-00000-of-00001", "index")
    ]
    averaged, reference = (_model_with_dropout_and_optimizer()[0] for _ in range(2))
    checkpoints.average_checkpoints(averaged, kept)
    checkpoints.average_checkpoints(reference, [str(whole / f"ckpt-{step}") for step in (2, 3, 4)])
    for ours, theirs in zip(averaged.weights, reference.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
        np.testing.assert_array_equal(np.asarray(ours), 3.25)


def test_the_random_generators_state_is_restored_and_a_checkpoint_without_it_resumes_as_before(tmp_path):
    tracker, model, _ = run = _tracker(tmp_path / "new")
    _save_with_weights(run, 1)
    (saved_state,) = checkpoints.random_states(model)
    assert saved_state.numpy()[1] == 1  # one draw made
    restored_tracker, restored, _ = _tracker(tmp_path / "new")
    (state,) = checkpoints.random_states(restored)
    assert state.numpy()[1] == 0
    restored_tracker.restore_latest()
    np.testing.assert_array_equal(state.numpy(), saved_state.numpy())

    # A checkpoint written before the generators were saved restores the rest; the
    # generator keeps its initial state.
    model, optimizer = _model_with_dropout_and_optimizer()
    old = tf.train.Checkpoint(
        weights=checkpoints.named_weights(model), optimizer=optimizer, progress=checkpoints.Progress()
    )
    tf.train.CheckpointManager(old, str(tmp_path / "old" / "checkpoints"), max_to_keep=1).save(checkpoint_number=3)
    tracker, model, _ = _tracker(tmp_path / "old")
    (state,) = checkpoints.random_states(model)
    initial = state.numpy()
    assert tracker.restore_latest() == str(tmp_path / "old" / "checkpoints" / "ckpt-3")
    np.testing.assert_array_equal(state.numpy(), initial)


def test_a_crash_between_the_writes_of_a_save_leaves_a_resumable_run(tmp_path, monkeypatch):
    tracker, model, _ = run = _tracker(tmp_path)
    _save_with_weights(run, 1)

    # Killed after the weights-only copy, before the full checkpoint: the run resumes from
    # the one before.
    def killed(*args):
        raise RuntimeError("killed")

    monkeypatch.setattr(checkpoints, "_save_numbered", killed)
    with pytest.raises(RuntimeError, match="killed"):
        _save_with_weights(run, 2)
    monkeypatch.undo()
    tracker, model, _ = run = _tracker(tmp_path)
    assert os.path.basename(tracker.restore_latest()) == "ckpt-1"
    np.testing.assert_array_equal(np.asarray(model.weights[0]), 1.25)

    # Killed while the older checkpoint is written over by its weights alone: the index
    # names the copy meanwhile, so averaging reads complete checkpoints and the newest
    # resumes; the next save finishes the change.
    def half_copied(source, target):
        for name in os.listdir(tmp_path / "checkpoints"):
            if name.startswith(os.path.basename(target) + ".") and ".weights" not in name:
                (tmp_path / "checkpoints" / name).write_bytes(b"\x00half-written")
        raise RuntimeError("killed")

    monkeypatch.setattr(checkpoints, "_copy_checkpoint", half_copied)
    with pytest.raises(RuntimeError, match="killed"):
        _save_with_weights(run, 2)
    monkeypatch.undo()
    kept = checkpoints.checkpoint_paths(tmp_path)
    assert [os.path.basename(path) for path in kept] == ["ckpt-1.weights", "ckpt-2"]
    averaged = _model_with_dropout_and_optimizer()[0]
    checkpoints.average_checkpoints(averaged, kept)
    np.testing.assert_array_equal(np.asarray(averaged.weights[0]), 1.75)
    tracker, model, _ = run = _tracker(tmp_path)
    assert os.path.basename(tracker.restore_latest()) == "ckpt-2"
    np.testing.assert_array_equal(np.asarray(model.weights[0]), 2.25)
    _save_with_weights(run, 3)
    kept = checkpoints.checkpoint_paths(tmp_path)
    assert [os.path.basename(path) for path in kept] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert [_parts(path) for path in kept] == [{"weights"}, {"weights"}, {"weights", "optimizer", "progress", "random",
                                                                          "save_counter"}]
    checkpoints.average_checkpoints(averaged, kept)
    np.testing.assert_array_equal(np.asarray(averaged.weights[0]), 2.25)
    assert not [name for name in _checkpoint_files(tmp_path) if ".weights" in name and not name.startswith("ckpt-3.")]


def test_a_checkpoint_saved_on_an_interrupt_is_the_whole_one_until_the_next_save_removes_it(tmp_path):
    # An uninterrupted run keeps checkpoints 2 and 4 (every 2 steps, the newest 2).
    tracker, model, _ = run = _tracker(tmp_path / "straight", keep=2)
    for step in (2, 4):
        _save_with_weights(run, step)
    # Interrupted at step 3, and resumed.
    tracker, model, _ = run = _tracker(tmp_path / "pressed", keep=2)
    _save_with_weights(run, 2)
    _save_with_weights(run, 3, on_interrupt=True)
    kept = checkpoints.checkpoint_paths(tmp_path / "pressed")
    assert [os.path.basename(path) for path in kept] == ["ckpt-2", "ckpt-3"]
    assert [_parts(path) for path in kept] == [{"weights"}, {"weights", "optimizer", "progress", "random",
                                                             "save_counter"}]
    tracker, model, _ = run = _tracker(tmp_path / "pressed", keep=2)
    assert os.path.basename(tracker.restore_latest()) == "ckpt-3"
    _save_with_weights(run, 4)
    for run in ("straight", "pressed"):
        kept = checkpoints.checkpoint_paths(tmp_path / run)
        assert [os.path.basename(path) for path in kept] == ["ckpt-2", "ckpt-4"]
        assert _parts(kept[0]) == {"weights"}
    assert _checkpoint_files(tmp_path / "pressed") == _checkpoint_files(tmp_path / "straight")
