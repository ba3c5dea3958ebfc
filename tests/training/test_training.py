"""Training: schedule, loss, accumulation, resuming, NaN stops, Ctrl-C, averaging."""

import dataclasses
import glob
import json
import math
import os
import re
import signal
import time
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.util import event_pb2

from app.model_dir import checkpoints

from app.training import loop as training
from app.model.config import ModelConfig
from app.training.losses import smoothed_cross_entropy, summed_loss, summed_loss_and_nll
from app.model.transformer import build_transformer
from app.training.schedule import WarmupInverseSqrt, cooldown_steps, default_warmup_steps, resolve_warmup_steps
from app.training.loop import NonFiniteLoss, TrainConfig, make_optimizer, make_train_step, train
from data.config import DataConfig



# ---------------------------------------------------------------------------------------
# Pure pieces.


@pytest.mark.parametrize("step", [1, 100, 3999, 4000, 4001, 100_000])
def test_schedule_equals_the_papers_formula(step):
    schedule = WarmupInverseSqrt(d_model=512, warmup_steps=4000)
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    # Keras passes the 0-based iteration count; the paper's step counts from 1.
    assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("step", [1, 50, 799, 800, 801, 900, 999, 1000])
def test_cooldown_falls_linearly_to_the_runs_end(step):
    schedule = WarmupInverseSqrt(d_model=128, warmup_steps=100, total_steps=1000, cooldown_steps=200)
    paper = 128**-0.5 * min(step**-0.5, step * 100**-1.5)
    # 1 until step 801, then 200/200, 199/200, ..., 1/200 at the last update.
    factor = min(1.0, (1000 - step + 1) / 200)
    assert float(schedule(step - 1)) == pytest.approx(paper * factor, rel=1e-6)


def test_schedule_scale_multiplies_it_and_survives_its_config():
    schedule = WarmupInverseSqrt(d_model=512, warmup_steps=4000, scale=2.5, total_steps=9000, cooldown_steps=100)
    assert float(schedule(99)) == pytest.approx(2.5 * 512**-0.5 * 100 * 4000**-1.5, rel=1e-6)
    config = schedule.get_config()
    assert config == dict(d_model=512, warmup_steps=4000, scale=2.5, total_steps=9000, cooldown_steps=100)
    assert WarmupInverseSqrt.from_config(config).get_config() == config


def test_a_variable_run_length_without_cooldown_never_lowers_the_rate():
    # Past total_steps too: cooldown(step) is 1 whenever cooldown_steps is 0.
    schedule = WarmupInverseSqrt(
        d_model=128, warmup_steps=10, total_steps=tf.Variable(5), cooldown_steps=tf.Variable(0)
    )
    assert float(schedule(19)) == pytest.approx(128**-0.5 * 20**-0.5, rel=1e-6)


def test_the_cooldown_is_the_rounded_share_of_the_run():
    assert cooldown_steps(1000, 0.2558) == 256  # 255.8
    assert cooldown_steps(9000, 0.25) == 2250


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(warmup_steps=0), "warmup_steps must be at least 1, got 0"),
        (dict(total_steps=100, cooldown_steps=-1), "cooldown_steps must not be negative, got -1"),
    ],
)
def test_schedule_rejects_bad_settings_by_name(arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        WarmupInverseSqrt(d_model=128, **arguments)


def test_cooldown_needs_a_run_at_least_as_long():
    with pytest.raises(
        ValueError, match="cooldown_steps=200 needs a run of at least that many steps, got total_steps=100"
    ):
        WarmupInverseSqrt(d_model=128, warmup_steps=10, total_steps=100, cooldown_steps=200)
    with pytest.raises(ValueError, match="cooldown_fraction must be between 0 and 1, got 1.5"):
        TrainConfig(train_steps=10, cooldown_fraction=1.5)
    assert TrainConfig(train_steps=9000, cooldown_fraction=0.25).resolved_cooldown(9000) == 2250


def test_label_smoothed_loss_equals_a_hand_computation_and_ignores_padding():
    logits = np.array([[[2.0, 0.0, 1.0, 0.0], [0.0, 3.0, 0.0, 1.0], [5.0, 5.0, 5.0, 5.0]]], "float32")
    labels = np.array([[2, 1, 0]], "int32")  # the last position is padding
    epsilon = 0.1
    loss, weights = smoothed_cross_entropy(labels, logits, epsilon)

    def by_hand(row, label):
        log_probs = row - math.log(sum(math.exp(x) for x in row))
        target = [epsilon / 3] * 4
        target[label] = 1 - epsilon
        return -sum(t * lp for t, lp in zip(target, log_probs))

    expected = [by_hand(logits[0, 0], 2), by_hand(logits[0, 1], 1), 0.0]
    np.testing.assert_allclose(np.asarray(loss)[0], expected, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(weights), [[1.0, 1.0, 0.0]])
    total, tokens = summed_loss(labels, logits, epsilon)
    assert float(total) == pytest.approx(sum(expected), rel=1e-6)
    assert float(tokens) == 2.0


def test_validation_loss_and_nll_equal_the_training_loss_at_their_smoothing():
    # summed_loss_and_nll (validation, and the loss off TensorFlow) has its own path; the
    # training loss above is pinned to a hand computation.
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3.0, size=(2, 4, 7)).astype("float32")
    labels = np.array([[3, 0, 6, 1], [2, 5, 0, 0]], "int32")  # zeros are padding
    smoothed, nll, tokens = summed_loss_and_nll(labels, logits, 0.1)
    assert float(smoothed) == pytest.approx(float(summed_loss(labels, logits, 0.1)[0]), rel=1e-6)
    assert float(nll) == pytest.approx(float(summed_loss(labels, logits, 0.0)[0]), rel=1e-6)
    assert float(tokens) == 5.0
    assert float(smoothed) != pytest.approx(float(nll), rel=1e-3)


def test_the_written_out_loss_gradient_equals_autodiff_of_the_loss():
    """`smoothed_cross_entropy` differentiates by hand (p - t); autodiff must agree."""
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(scale=3.0, size=(2, 4, 7)).astype("float32"))  # [B, T, V]
    labels = tf.constant([[3, 0, 6, 1], [2, 5, 0, 0]], tf.int32)  # zeros are padding
    upstream = tf.constant(rng.uniform(0.5, 2.0, size=(2, 4)).astype("float32"))  # [B, T]
    epsilon = 0.1
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, _ = smoothed_cross_entropy(labels, logits, epsilon)
        targets = tf.one_hot(labels, 7) * (1 - epsilon - epsilon / 6) + epsilon / 6
        mask = tf.cast(labels != 0, tf.float32)
        reference = -tf.reduce_sum(targets * tf.nn.log_softmax(logits), axis=-1) * mask
        weighted, weighted_reference = tf.reduce_sum(loss * upstream), tf.reduce_sum(reference * upstream)
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-6, atol=1e-6)
    gradient, reference_gradient = tape.gradient(weighted, logits), tape.gradient(weighted_reference, logits)
    np.testing.assert_allclose(gradient.numpy(), reference_gradient.numpy(), atol=1e-6)
    assert np.all(gradient.numpy()[labels.numpy() == 0] == 0.0)  # nothing flows from padding


def test_accumulated_micro_batches_give_the_gradient_of_their_combined_token_mean():
    config = ModelConfig.from_size("tiny", vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0)
    model = build_transformer(config)
    rng = np.random.default_rng(0)
    first = (rng.integers(3, 30, (2, 5)).astype("int32"), rng.integers(3, 30, (2, 6)).astype("int32"))
    second = (rng.integers(3, 30, (4, 3)).astype("int32"), rng.integers(3, 30, (4, 4)).astype("int32"))
    second[1][:, -1] = 0  # some padding in the targets

    with tf.GradientTape() as tape:
        losses = [summed_loss(t[:, 1:], model([s, t[:, :-1]], training=True), 0.1) for s, t in (first, second)]
        reference = (losses[0][0] + losses[1][0]) / (losses[0][1] + losses[1][1])
    grads = tape.gradient(reference, model.trainable_variables)
    expected = [np.asarray(v) - np.asarray(tf.convert_to_tensor(g)) for v, g in zip(model.trainable_variables, grads)]

    optimizer = keras.optimizers.SGD(learning_rate=1.0)
    step = make_train_step(model, optimizer, tf.distribute.get_strategy(), 0.1, accumulate=2)
    loss_sum, tokens = step((first, second))
    assert float(tokens) == float(losses[0][1] + losses[1][1])
    assert float(loss_sum) == pytest.approx(float(losses[0][0] + losses[1][0]), rel=1e-5)
    for variable, want in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(np.asarray(variable), want, atol=1e-6)


def test_with_a_batch_spec_one_trace_of_each_step_serves_every_batch_shape():
    config = ModelConfig.from_size("tiny", vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0)
    model = build_transformer(config)
    strategy = tf.distribute.get_strategy()
    spec = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32))
    train_step = make_train_step(model, keras.optimizers.SGD(0.0), strategy, 0.1, accumulate=2, batch_spec=spec)
    eval_step = training.make_eval_step(model, strategy, 0.1, batch_spec=spec)
    rng = np.random.default_rng(0)
    for rows, source_length, target_length in [(2, 5, 6), (2, 7, 6), (8, 3, 4), (1, 9, 12)]:
        batch = tuple(rng.integers(3, 30, (rows, n)).astype("int32") for n in (source_length, target_length))
        train_step((batch, batch))
        eval_step(batch)
    assert train_step.experimental_get_tracing_count() == 1
    assert eval_step.experimental_get_tracing_count() == 1


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


def test_train_config_rejects_bad_values():
    with pytest.raises(ValueError, match="give --train-steps or --epochs"):
        TrainConfig()
    with pytest.raises(ValueError, match="accumulate must be at least 1, got 0"):
        TrainConfig(train_steps=1, accumulate=0)
    with pytest.raises(ValueError, match="precision='float8'"):
        TrainConfig(train_steps=1, precision="float8")
    with pytest.raises(ValueError, match="weight_decay must be a non-negative number, got -0.1"):
        TrainConfig(train_steps=1, weight_decay=-0.1)
    with pytest.raises(ValueError, match="weight_decay must be a non-negative number, got nan"):
        TrainConfig(train_steps=1, weight_decay=float("nan"))
    for field, bad, message in [
        ("learning_rate_scale", 0.0, "learning_rate_scale must be a positive number, got 0.0"),
        ("learning_rate_scale", -1.0, "learning_rate_scale must be a positive number, got -1.0"),
        ("learning_rate_scale", float("inf"), "learning_rate_scale must be a positive number, got inf"),
        ("log_every", 0, "log_every must be at least 1, got 0"),
        ("eval_every", -1, r"eval_every must not be negative \(0: only at the end\), got -1"),
        ("eval_sentences", -3, r"eval_sentences must be at least 1 \(or all, by default\), got -3"),
        ("eval_sentences", 0, r"eval_sentences must be at least 1 \(or all, by default\), got 0"),
        ("checkpoint_minutes", 0.0, "checkpoint_minutes must be positive, got 0.0"),
        ("train_steps", 0, "train_steps must be at least 1, got 0"),
        ("epochs", 0, "epochs must be at least 1, got 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            TrainConfig(**{"train_steps": 1, field: bad})
    with pytest.raises(ValueError) as refused:
        TrainConfig(train_steps=1, patience=3, eval_every=0)
    assert str(refused.value) == (
        "patience 3 counts evaluations, and eval_every 0 evaluates only at the end: give --eval-every too"
    )
    # The edges that are allowed: an evaluation only at the end, one validation sentence.
    TrainConfig(train_steps=1, eval_every=0, eval_sentences=1, learning_rate_scale=1e-3)


@pytest.mark.parametrize(
    "positional, normalization", [("sinusoidal", "layer"), ("learned", "layer"), ("sinusoidal", "scale")]
)
def test_weight_decay_shrinks_every_matrix_by_the_learning_rate_times_it_and_no_vector(positional, normalization):
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2, positional=positional,
        normalization=normalization,
    )
    model = build_transformer(config)
    # Random values everywhere, so that a decayed bias or layer-norm offset would show.
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    before = [np.asarray(variable) for variable in model.trainable_variables]
    optimizer = make_optimizer(config, TrainConfig(train_steps=100, weight_decay=0.5), 100)
    optimizer.build(model.trainable_variables)
    learning_rate = np.float32(optimizer.learning_rate)  # The first step's.
    # Zero gradients: Adam's own step is exactly zero, so only the decay moves a weight.
    optimizer.apply([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables)

    decayed = [v.path for v in model.trainable_variables if len(v.shape) >= 2]
    assert "shared_embedding/embeddings" in decayed and "decoder_layer_0/cross_attention/value/kernel" in decayed
    learned_positions = {"source_positions/position_embeddings", "target_positions/position_embeddings"}
    assert (learned_positions <= set(decayed)) == (positional == "learned")
    for variable, old in zip(model.trainable_variables, before):
        if variable.path in decayed:
            np.testing.assert_allclose(np.asarray(variable), old - old * np.float32(0.5) * learning_rate, rtol=1e-6)
        else:  # biases, gamma and beta (ScaleNorm: a scalar gamma)
            np.testing.assert_array_equal(np.asarray(variable), old, err_msg=variable.path)
    scales = [v.path for v in model.trainable_variables if v.path.endswith("gamma") and len(v.shape) == 0]
    assert len(scales) == (7 if normalization == "scale" else 0)  # 2 + 3 + the 2 final norms


def test_without_weight_decay_the_optimizer_is_the_papers_adam():
    config = ModelConfig.from_size("tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    optimizer = make_optimizer(config, TrainConfig(train_steps=100), 100)
    assert optimizer.weight_decay is None
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)


def test_warmup_is_the_papers_unless_the_run_is_short():
    assert TrainConfig(train_steps=100_000).resolved_warmup(100_000) == 4000
    assert TrainConfig(train_steps=1000).resolved_warmup(1000) == 80
    assert TrainConfig(train_steps=1000, warmup_steps=10).resolved_warmup(1000) == 10


def test_default_warmup_rounds_8_percent_and_caps_at_the_papers_4000():
    # app.training.schedule.default_warmup_steps is the rule train.py and benchmarks/gpu/train_jax.py
    # share: rounded, not truncated (1,031 steps -> 82.48 -> 82; 1,037 -> 82.96 -> 83),
    # at least one step, and the paper's 4,000 from 50,000 steps on or for a run of
    # unknown length.
    assert default_warmup_steps(16_000) == 1280  # tiny's default
    assert default_warmup_steps(1031) == 82
    assert default_warmup_steps(1037) == 83
    assert default_warmup_steps(6) == 1
    assert default_warmup_steps(49_000) == 3920
    assert default_warmup_steps(300_000) == 4000
    assert default_warmup_steps(None) == 4000


def test_an_explicit_warmup_wins_and_zero_means_one_step():
    # resolve_warmup_steps is what both train.py and train_jax.py call; train_jax once read
    # `warmup_steps or default`, which turned an explicit 0 into the default 8%.
    assert resolve_warmup_steps(None, 16_000) == 1280
    assert resolve_warmup_steps(10, 16_000) == 10
    assert resolve_warmup_steps(0, 16_000) == 1
    assert resolve_warmup_steps(6000, 1000) == 6000  # asked for, so not capped


# ---------------------------------------------------------------------------------------
# Whole runs on a small slice of Multi30k.


# `small_corpus` and `small_data` (tests/conftest.py): 300 pairs of Multi30k, prepared.


def small_model_config(data):
    return ModelConfig.from_size(
        "tiny", vocab_size=data.tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
        max_length=64, dropout=0.0,
    )


def run_training(data, model_dir, evaluate_fn=None, **overrides):
    fields = dict(train_steps=6, warmup_steps=2, eval_every=0, checkpoint_every=3, log_every=1, seed=3)
    fields.update(overrides)
    return train(
        small_model_config(data), data, TrainConfig(**fields), str(model_dir),
        tf.distribute.get_strategy(), evaluate_fn, log=lambda *_: None,
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


def test_the_run_length_needs_an_epoch_of_at_least_one_update(small_data):
    batches = len(small_data.train_plan(0, 3))
    assert training.run_length(TrainConfig(epochs=2, seed=3), small_data) == 2 * batches
    assert training.run_length(TrainConfig(epochs=2, train_steps=5, accumulate=2, seed=3), small_data) == 5
    too_many = TrainConfig(train_steps=1, accumulate=batches + 1, seed=3)
    with pytest.raises(ValueError, match=f"makes {batches} batches per epoch, fewer than --accumulate {batches + 1}"):
        training.run_length(too_many, small_data)


def test_a_few_steps_lower_the_loss(small_data, tmp_path):
    result = run_training(small_data, tmp_path, train_steps=30, learning_rate_scale=2.0)
    records = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    first, last = np.mean([r["loss"] for r in records[:3]]), np.mean([r["loss"] for r in records[-3:]])
    assert last < first - 0.5, (first, last)
    assert result["step"] == 30
    assert all(r["tokens_per_second"] > 0 for r in records)


def test_each_record_logs_the_learning_rate_its_step_was_trained_at(small_data, tmp_path):
    run_training(small_data, tmp_path, train_steps=5, warmup_steps=2, cooldown_fraction=0.4)
    records = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    d_model = small_model_config(small_data).d_model
    schedule = WarmupInverseSqrt(d_model, 2, 1.0, total_steps=5, cooldown_steps=2)
    # Step n is the n-th update, made at the schedule's iteration n - 1. The last update
    # is made at half the rate of the one before (a cooldown of 2), never at 0.
    want = [float(schedule(n - 1)) for n in range(1, 6)]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([r["learning_rate"] for r in records], want, rtol=1e-6)
    assert records[-1]["learning_rate"] == pytest.approx(records[-2]["learning_rate"] * 0.5 * (4 / 5) ** 0.5, rel=1e-6)


def test_off_a_terminal_progress_is_plain_lines_between_the_messages(small_data, tmp_path):
    lines = []
    config = TrainConfig(train_steps=6, warmup_steps=2, eval_every=4, log_every=3)
    train(
        small_model_config(small_data), small_data, config, str(tmp_path), tf.distribute.get_strategy(),
        lambda t: {"bleu": 1.0}, log=lines.append,
    )
    progress = [line for line in lines if line.startswith("step ") and "/" in line.split()[1]]
    assert [line.split(" - ")[0] for line in progress] == ["step 3/6", "step 6/6"]
    pattern = r"step \d/6 - loss: \d+\.\d{4} - lr: \S+ - tok/s: \d+( - eta: 0:\d\d)?"
    assert all(re.fullmatch(pattern, line) for line in progress), progress
    assert any(line.startswith("step 4: validation loss") for line in lines)
    assert not [line for line in lines if "\x1b" in line or "\b" in line or "\r" in line or line.startswith("\n")]


def test_tokens_per_second_leave_out_the_time_spent_evaluating(small_data, tmp_path, monkeypatch):
    # A wall clock that moves one second per reading, and 1,000 while evaluating.
    wall = {"now": 0.0}

    def fake_time():
        wall["now"] += 1.0
        return wall["now"]

    def slow_evaluation(transformer):
        wall["now"] += 1000.0
        return {"bleu": 1.0}

    monkeypatch.setattr(training, "time", types.SimpleNamespace(time=fake_time, monotonic=time.monotonic))
    run_training(small_data, tmp_path, evaluate_fn=slow_evaluation, eval_every=3, train_steps=6)
    rates = [r["tokens_per_second"] for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    assert len(rates) == 6
    # Batches differ in size by less than 10 times; 1,000 seconds more would be 100 times slower.
    assert max(rates) < 10 * min(rates), rates


def test_a_run_traces_its_training_and_evaluation_steps_once(small_data, tmp_path, monkeypatch):
    # Traced again per new pattern of shapes, the two steps (one closure) reached the five
    # traces of TensorFlow's "triggered tf.function retracing" warning at a run's first
    # evaluation whenever its first batches differed in shape, as at base's batch size.
    steps = []
    summed_over_replicas = training._summed_over_replicas

    def keep(*args):
        steps.append(summed_over_replicas(*args))
        return steps[-1]

    monkeypatch.setattr(training, "_summed_over_replicas", keep)
    run_training(small_data, tmp_path, train_steps=6, eval_every=3)
    plans = [small_data.train_plan(0, 3), small_data.eval_plan("validation")]
    shapes = [set(zip(plan.rows, plan.source_lengths, plan.target_lengths)) for plan in plans]
    assert len(shapes[0]) > 3 and len(shapes[1]) > 3  # shapes enough to have been traced again
    assert [step.experimental_get_tracing_count() for step in steps] == [1, 1]


def test_resuming_after_a_crash_matches_an_uninterrupted_run(small_data, tmp_path):
    uninterrupted = run_training(small_data, tmp_path / "straight", eval_every=4)

    def crash(transformer):
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        run_training(small_data, tmp_path / "resumed", evaluate_fn=crash, eval_every=4)
    # The crash came at step 4; the newest checkpoint is step 3's.
    assert checkpoints.checkpoint_paths(tmp_path / "resumed")[-1].endswith("ckpt-3")
    metrics = tmp_path / "resumed" / "metrics.jsonl"
    assert [json.loads(line)["step"] for line in open(metrics)] == [1, 2, 3, 4]
    with open(metrics, "a") as f:
        f.write('{"step": 5, "lo')  # a record cut off by the crash
    resumed = run_training(small_data, tmp_path / "resumed", eval_every=4)

    assert resumed["step"] == uninterrupted["step"] == 6
    expected, actual = checkpoint_weights(uninterrupted["checkpoint"]), checkpoint_weights(resumed["checkpoint"])
    assert expected.keys() == actual.keys() and expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], atol=1e-6, err_msg=name)
    # Step 4 was recorded before the crash and again after the resume from step 3: once.
    expected, actual = (
        [json.loads(line) for line in open(run / "metrics.jsonl")] for run in (tmp_path / "straight", metrics.parent)
    )
    assert [(r["step"], sorted(r)) for r in actual] == [(r["step"], sorted(r)) for r in expected]
    assert [r["step"] for r in actual] == [1, 2, 3, 4, 4, 5, 6, 6]  # evaluations at 4 and (the final) 6
    losses = [[r.get("loss", r.get("valid_loss")) for r in records] for records in (actual, expected)]
    np.testing.assert_allclose(*losses, rtol=1e-5)
    # So in TensorBoard's files: step 4's loss, written before the crash, once.
    expected, actual = (summaries(run) for run in (tmp_path / "straight", metrics.parent))
    assert sorted(actual) == sorted(expected)
    assert ("loss", 4) in actual and len(set(actual)) == len(actual)


def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(small_data, tmp_path):
    def poison(transformer):
        kernel = transformer.encoder_layers[0].feed_forward.inner_dense.kernel
        kernel.assign(np.full(kernel.shape, np.nan, "float32"))
        return {}

    with pytest.raises(NonFiniteLoss, match=r"the loss became nan at step 3.*ckpt-2"):
        run_training(small_data, tmp_path, evaluate_fn=poison, eval_every=2, checkpoint_every=2)
    newest = checkpoints.checkpoint_paths(tmp_path)[-1]
    assert newest.endswith("ckpt-2")
    assert all(np.isfinite(w).all() for w in checkpoint_weights(newest).values())


def test_ctrl_c_saves_a_checkpoint_before_exiting(small_data, tmp_path):
    def press_ctrl_c(transformer):
        os.kill(os.getpid(), signal.SIGINT)
        return {}

    with pytest.raises(KeyboardInterrupt):
        run_training(small_data, tmp_path, evaluate_fn=press_ctrl_c, eval_every=2, checkpoint_every=100)
    assert checkpoints.checkpoint_paths(tmp_path)[-1].endswith("ckpt-2")


def test_a_second_ctrl_c_during_a_step_counts_that_step_before_saving(small_data, tmp_path, monkeypatch):
    # The second signal raises as soon as Python runs again: after step 3's update and
    # before the loop counted it. The checkpoint was ckpt-2 holding step 3's weights, and
    # the resumed run trained step 3's batch again.
    uninterrupted = run_training(small_data, tmp_path / "straight", checkpoint_every=3)
    make_train_step = training.make_train_step

    def make_step_pressed_twice_at_step_3(*args, **kwargs):
        train_step, calls = make_train_step(*args, **kwargs), []

        def pressed(micro_batches):
            result = train_step(micro_batches)
            calls.append(len(calls) + 1)
            if calls[-1] == 3:
                os.kill(os.getpid(), signal.SIGINT)  # the first: a flag, read after the step
                os.kill(os.getpid(), signal.SIGINT)  # the second raises here
            return result

        return pressed

    monkeypatch.setattr(training, "make_train_step", make_step_pressed_twice_at_step_3)
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


def test_a_checkpoint_saved_on_an_interrupt_after_the_last_step_becomes_the_final_one(
    small_data, tmp_path, monkeypatch
):
    # Ctrl-C during step 7 of 7, off the cadence of 2: the run stops with a checkpoint saved
    # on the interrupt, and its resume, with no step left, saves step 7 as its final one.
    keep = dict(train_steps=7, checkpoint_every=2, keep_checkpoints=3)
    run_training(small_data, tmp_path / "straight", **keep)
    make_train_step = training.make_train_step

    def make_step_pressed_at_step_7(*args, **kwargs):
        train_step, calls = make_train_step(*args, **kwargs), []

        def pressed(micro_batches):
            calls.append(len(calls) + 1)
            if calls[-1] == 7:
                os.kill(os.getpid(), signal.SIGINT)  # a flag, read after the step
            return train_step(micro_batches)

        return pressed

    monkeypatch.setattr(training, "make_train_step", make_step_pressed_at_step_7)
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

    monkeypatch.setattr(training, "_stop_check", stop_for_another_workers_signal)
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
    monkeypatch.setattr(training, "max_over_workers", None)  # Not to be called.
    interrupted = training._InterruptFlag()
    for strategy in (tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(["/cpu:0"])):
        stop_requested = training._stop_check(strategy, interrupted, 0, time.monotonic)
        interrupted.raised = False
        assert [stop_requested(1), stop_requested(2)] == [False, False]
        interrupted.raised = True
        assert stop_requested(3) is True


def test_workers_reduce_their_flags_about_once_a_second_of_the_slowest_and_at_the_last_step():
    interrupted = training._InterruptFlag()
    now = [100.0]
    reduced = []

    def over_workers(values):  # [flag, seconds per step]; the other worker is twice as slow
        reduced.append(values)
        return [values[0], 2 * values[1]]

    stop_requested = training._AgreedStop(interrupted, over_workers, 10, lambda: now[0])
    answers = []
    for step in range(11, 21):
        now[0] += 0.125  # 8 steps a second here, 4 on the slowest worker: 4 steps between reductions
        interrupted.raised = step >= 16
        answers.append(stop_requested(step, last=step == 20))
    # Reduced after steps 11 (the first), 15, 19 and 20 (the last).
    assert reduced == [[0.0, 0.125], [0.0, 0.125], [1.0, 0.125], [1.0, 0.125]]
    assert answers == [False] * 8 + [True, True]


def test_the_best_checkpoint_follows_the_score(small_data, tmp_path):
    # Evaluations at steps 2, 4 and 6, and the final one at step 7.
    scores = iter([5.0, 9.0, 7.0, 8.0])
    result = run_training(
        small_data, tmp_path, evaluate_fn=lambda t: {"bleu": next(scores)}, eval_every=2, train_steps=7
    )
    best = json.load(open(tmp_path / "best" / "best.json"))
    assert (best["step"], best["score"]) == (4, 9.0)
    assert result["best_checkpoint"].endswith("ckpt-4")
    np.testing.assert_array_equal(
        sorted(checkpoint_weights(result["best_checkpoint"])), sorted(checkpoint_weights(result["checkpoint"]))
    )


@pytest.mark.parametrize("checkpoint_every", [1, 100])
def test_patience_counts_the_same_evaluations_in_a_resumed_run_as_in_an_uninterrupted_one(
    small_data, tmp_path, checkpoint_every
):
    # The scores of the evaluations at steps 1, 2, ...: the best at step 2, then two
    # without gain stop the run at step 4.
    scores = [5.0, 9.0, 7.0, 8.0, 8.5]

    def scored(first_step, last_step=len(scores)):
        left = iter(scores[first_step - 1 : last_step])

        def evaluate(transformer):
            score = next(left, None)
            if score is None:
                raise RuntimeError("simulated crash")
            return {"bleu": score}

        return evaluate

    flags = dict(eval_every=1, patience=2, train_steps=6, checkpoint_every=checkpoint_every)
    assert run_training(small_data, tmp_path / "straight", evaluate_fn=scored(1), **flags)["step"] == 4
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_training(small_data, tmp_path / "resumed", evaluate_fn=scored(1, last_step=2), **flags)
    # The crash came in step 3's evaluation. Resumed from step 3's checkpoint, the run
    # trains on to step 4; from none (a checkpoint every 100 steps), it starts again from
    # step 0 with step 2's best on record, and its evaluations of steps 1 and 2, redone,
    # are no losses.
    resume_from = {1: 3, 100: 0}[checkpoint_every]
    resumed = run_training(small_data, tmp_path / "resumed", evaluate_fn=scored(resume_from + 1), **flags)
    assert resumed["step"] == 4


def test_a_damaged_checkpoint_or_best_record_is_named_when_training_resumes(small_data, tmp_path):
    from app.model_dir.checkpoints import CheckpointError

    run_training(small_data, tmp_path, train_steps=3)
    best = tmp_path / "best" / "best.json"
    best.write_text('{"step": 3, "sco')
    with pytest.raises(CheckpointError, match=f"^{best} is not valid JSON .*; restore it, or delete it"):
        run_training(small_data, tmp_path, train_steps=6)
    best.write_text("[3]")
    with pytest.raises(CheckpointError, match=f"^{best} holds list, not a JSON object"):
        run_training(small_data, tmp_path, train_steps=6)
    best.unlink()
    newest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    (data_file,) = (tmp_path / "checkpoints").glob(os.path.basename(newest) + ".data-*")
    data_file.write_bytes(data_file.read_bytes()[:100])  # cut short
    with pytest.raises(CheckpointError, match=f"^checkpoint {newest} cannot be read .*missing or damaged$"):
        run_training(small_data, tmp_path, train_steps=6)


def test_resuming_with_another_model_configuration_is_refused(tmp_path):
    from app.model_dir.settings import save_settings

    data_config = DataConfig(batch_tokens=512)
    train_config = TrainConfig(train_steps=1)
    save_settings(str(tmp_path), ModelConfig.from_size("tiny"), data_config, train_config)
    with pytest.raises(
        ValueError,
        match=r"another model configuration \(d_model: 128 -> 256, key_dim: 32 -> 64, value_dim: 32 -> 64\); "
        r"use another --model-dir",
    ):
        save_settings(str(tmp_path), ModelConfig.from_size("tiny", d_model=256), data_config, train_config)


def test_resuming_logs_changed_training_settings_and_refuses_a_change_of_loss_scaling(tmp_path):
    from app.model_dir.settings import save_settings

    model, data = ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512)
    save_settings(str(tmp_path), model, data, TrainConfig(train_steps=1, precision="float32"))
    lines = []
    longer_bf16 = TrainConfig(train_steps=3, precision="mixed_bfloat16")
    save_settings(str(tmp_path), model, data, longer_bf16, log=lines.append)
    assert lines == [
        "resuming with changed training settings: precision: 'float32' -> 'mixed_bfloat16', train_steps: 1 -> 3"
    ]
    lines.clear()
    save_settings(str(tmp_path), model, data, longer_bf16, log=lines.append)
    assert lines == []  # nothing changed, nothing said
    before = (tmp_path / "settings.json").read_text()
    with pytest.raises(
        ValueError,
        match=r"holds a run trained in mixed_bfloat16, which cannot resume in mixed_float16: .* "
        r"give --precision mixed_bfloat16 or use another --model-dir",
    ):
        save_settings(str(tmp_path), model, data, TrainConfig(train_steps=3, precision="mixed_float16"))
    assert (tmp_path / "settings.json").read_text() == before  # not rewritten


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"model": {', "is not valid JSON"),
        ('{"model": {}, "data": {}}', "lacks the section(s) train"),
        ('{"model": {"no_such_field": 1}, "data": {}, "train": {}}', "does not match this version's configuration"),
    ],
)
def test_a_damaged_settings_file_is_named_in_the_error(tmp_path, text, message):
    from app.model_dir.settings import load_settings, save_settings

    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        load_settings(str(tmp_path))
    assert str(path) in str(error.value) and message in str(error.value)
    if "JSON" in message or "lacks" in message:
        # Resuming reads it too, and must not overwrite what it could not read.
        with pytest.raises(ValueError, match="settings.json"):
            save_settings(
                str(tmp_path), ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512), TrainConfig(train_steps=1)
            )
        assert path.read_text() == text


def test_a_run_from_before_a_new_setting_resumes_with_its_default(tmp_path):
    from app.model_dir.settings import load_settings, save_settings

    model, data, train_config = ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512), TrainConfig(train_steps=1)
    save_settings(str(tmp_path), model, data, train_config)
    path = tmp_path / "settings.json"
    older = json.loads(path.read_text())
    del older["data"]["bpe_dropout"]  # settings.json as written before the flag existed
    path.write_text(json.dumps(older))
    save_settings(str(tmp_path), model, data, train_config)  # resumes
    assert load_settings(str(tmp_path))[1] == data
    with pytest.raises(ValueError, match=r"another data configuration \(bpe_dropout: 0.0 -> 0.1\)"):
        save_settings(str(tmp_path), model, dataclasses.replace(data, bpe_dropout=0.1), train_config)


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


def test_a_full_disk_names_the_file_it_could_not_write_and_the_checkpoint_to_resume_from(
    small_data, tmp_path, monkeypatch
):
    from app.model_dir.checkpoints import CheckpointError

    # What TensorFlow raised on a full disk, but for the temporary file's name.
    no_space = tf.errors.ResourceExhaustedError(
        None, None,
        "{{function_node __wrapped__SaveV2_dtypes_49_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
        "/x/ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; No space left on device [Op:SaveV2]",
    )
    save = tf.train.CheckpointManager.save

    def save_until_step_4(manager, checkpoint_number):
        if checkpoint_number == 4:
            os.makedirs(os.path.join(manager.directory, "ckpt-4_temp"))  # as TensorFlow leaves it
            raise no_space
        return save(manager, checkpoint_number=checkpoint_number)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save_until_step_4)
    directory = tmp_path / "checkpoints"
    with pytest.raises(CheckpointError) as raised:
        run_training(small_data, tmp_path, checkpoint_every=2)
    assert str(raised.value) == (
        f"cannot write {directory}/ckpt-4 (ResourceExhaustedError: "
        "/x/ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; No space left on device); "
        f"free some space or make {directory} writable, then run the same command to resume from {directory}/ckpt-2"
    )
    assert not (directory / "ckpt-4_temp").exists()
    # The best record: no half-written file is left beside it.
    monkeypatch.setattr(tf.train.CheckpointManager, "save", save)
    # The disk fills as the record's bytes are flushed (data.atomic_files).
    monkeypatch.setattr(os, "fsync", mock_raise(OSError(28, "No space left on device")))
    with pytest.raises(CheckpointError) as raised:
        run_training(
            small_data, tmp_path / "best-run", evaluate_fn=lambda t: {"bleu": 1.0}, eval_every=2, checkpoint_every=2
        )
    best = tmp_path / "best-run" / "best"
    assert str(raised.value) == (
        f"cannot write {best}/best.json (OSError: [Errno 28] No space left on device); free some space or make "
        f"{best} writable, then run the same command to resume from {tmp_path}/best-run/checkpoints/ckpt-2"
    )
    assert sorted(p.name for p in best.iterdir()) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    # metrics.jsonl, written at every record.
    monkeypatch.undo()
    def open_full_disk(path, mode="r", *args):
        if "a" in mode:
            raise OSError(28, "No space left on device")
        return open(path, mode, *args)

    monkeypatch.setattr(training, "open", open_full_disk, raising=False)
    with pytest.raises(CheckpointError) as raised:
        run_training(small_data, tmp_path / "metrics-run")
    assert str(raised.value) == (
        f"cannot write {tmp_path}/metrics-run/metrics.jsonl (OSError: [Errno 28] No space left on device); free "
        f"some space or make {tmp_path}/metrics-run writable, then run the same command to resume from the start"
    )


def mock_raise(error):
    def fail(*args, **kwargs):
        raise error

    return fail


def test_a_checkpoint_cut_off_while_saving_is_never_the_one_resumed(small_data, tmp_path):
    run_training(small_data, tmp_path, train_steps=3, checkpoint_every=3)
    # What a crash in the middle of saving step 6 leaves: data files, no index entry.
    directory = tmp_path / "checkpoints"
    (directory / "ckpt-6.index").write_bytes(b"\x00half-written")
    (directory / "ckpt-6.data-00000-of-00001").write_bytes(b"\x00half-written")
    assert checkpoints.checkpoint_paths(tmp_path)[-1].endswith("ckpt-3")
    resumed = run_training(small_data, tmp_path, train_steps=4, checkpoint_every=100)
    assert resumed["step"] == 4 and resumed["checkpoint"].endswith("ckpt-4")


def test_validation_loss_and_perplexity_equal_a_hand_computation_on_the_final_weights(small_data, tmp_path):
    # label smoothing 0.2: the smoothed loss and the perplexity's plain NLL then differ.
    config = dataclasses.replace(small_model_config(small_data), label_smoothing=0.2)
    train(
        config, small_data, TrainConfig(train_steps=3, warmup_steps=2, eval_every=0, log_every=1, seed=3),
        str(tmp_path), tf.distribute.get_strategy(), log=lambda *_: None,
    )
    final = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "valid_loss" in r][-1]

    model = build_transformer(config)
    checkpoints.restore_weights(model, checkpoints.checkpoint_paths(tmp_path)[-1])
    smoothed, nll, tokens = 0.0, 0.0, 0.0
    for source, target in small_data.eval_batches("validation"):
        logits = model([source, target[:, :-1]], training=False).numpy().astype("float64")
        labels = target[:, 1:].numpy()
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        mask = labels != 0
        label_log_probs = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        off = 0.2 / (config.vocab_size - 1)
        per_token = -((0.8 - off) * label_log_probs + off * log_probs.sum(-1))
        smoothed += per_token[mask].sum()
        nll += -label_log_probs[mask].sum()
        tokens += mask.sum()
    assert final["valid_loss"] == pytest.approx(smoothed / tokens, rel=1e-5)
    assert final["valid_perplexity"] == pytest.approx(np.exp(nll / tokens), rel=1e-5)
    # The two measure different things: the perplexity is not exp(smoothed loss).
    assert abs(math.log(final["valid_perplexity"]) - final["valid_loss"]) > 0.01


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

