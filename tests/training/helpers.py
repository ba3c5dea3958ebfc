"""Shared by the training tests: a small model for `small_data` (tests/conftest.py: 300
pairs of Multi30k, prepared), a short run of `train`, and what a run leaves behind."""

import glob
import os

import tensorflow as tf
from tensorflow.core.util import event_pb2

from app.model.config import ModelConfig
from app.training.config import TrainConfig
from app.training.loop import train
from app.training.run_plan import RunPlan


def small_model_config(data):
    return ModelConfig.from_size(
        "tiny", vocab_size=data.tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
        max_length=64, dropout=0.0,
    )


def run_training(data, model_dir, evaluate_fn=None, **overrides):
    fields = dict(train_steps=6, warmup_steps=2, eval_every=0, checkpoint_every=3, log_every=1, seed=3)
    fields.update(overrides)
    return train(
        RunPlan(size="tiny", variant=None, model_dir=str(model_dir), model_config=small_model_config(data),
                data_config=data.config, train_config=TrainConfig(**fields)),
        data, tf.distribute.get_strategy(), evaluate_fn, log=lambda *_: None,
    )


def summaries(model_dir):
    """(tag, step) of every summary in a run's TensorBoard files."""
    return [
        (value.tag, event.step)
        for path in glob.glob(os.path.join(model_dir, "train", "*tfevents*"))
        for event in map(event_pb2.Event.FromString, tf.data.TFRecordDataset(path).as_numpy_iterator())
        for value in event.summary.value
    ]


def checkpoint_weights(path):
    reader = tf.train.load_checkpoint(path)
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("weights/")]
    return {n: reader.get_tensor(n) for n in names}
