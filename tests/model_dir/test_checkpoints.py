"""Checkpoints (`app.model_dir.checkpoints`): averaging, restoring weights into a model of
the same configuration, and older checkpoints."""

import dataclasses
import json

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
