"""1 replica vs 8 mirrored replicas on the same global batch: the same loss and update;
and with dropout on, a mask of its own on every replica."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_eight_replicas_update_the_weights_like_one(optimizer):
    result = subprocess.run(
        [sys.executable, "-m", "tests.replica_equivalence", optimizer],
        cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 8
    for single, mirrored in report["losses"]:
        assert abs(single - mirrored) < 1e-5 * abs(single)
    # The second loss shows the first update was the same; the weights show the second.
    # Attention key biases are compared through the outputs only: their true gradient is
    # zero (see tests/replica_equivalence.py).
    # Adam divides each gradient by its own running magnitude, so the rounding of 8
    # partial sums against 1 shows in small-gradient weights: up to 2.9e-5 on steps of
    # about 0.09 for the pre-norm tiny model (under 1e-5 with post-norm). SGD stays within 1e-5.
    assert report["max_weight_difference"] < (1e-5 if optimizer == "sgd" else 1e-4)
    assert report["output_difference"] < 1e-4
    # Each replica updates its own copy from the same reduced gradients: the copies must
    # not differ at all (a checkpoint saves the first; a resumed run would otherwise differ).
    assert report["replica_differences"] == {}


@pytest.mark.parametrize("replicas", [2, 8])
def test_every_replica_draws_its_own_dropout_masks_and_replica_0_draws_one_replicas(replicas):
    # Every replica is given the same rows; under Keras's own seeding all of their outputs
    # were equal (one generator state, read alike by every replica).
    result = subprocess.run(
        [sys.executable, "-m", "tests.replica_dropout", str(replicas)],
        cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "replicas": replicas,
        "equal_pairs": [],
        "replica_0_equals_one_replica": True,
        "same_on_a_second_pass": True,
        "training_differs_from_inference": True,
    }


def test_cpu_replicas_where_gpus_are_visible_are_refused_by_name(monkeypatch):
    # Mirroring takes every visible GPU; --cpu-replicas would be left out without a word.
    import tensorflow as tf

    from app.training.strategy import make_strategy

    visible = [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")] * 2
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: visible if kind == "GPU" else [])
    for kind in ("auto", "mirrored"):
        with pytest.raises(ValueError) as refused:
            make_strategy(kind, cpu_replicas=4)
        assert str(refused.value) == (
            "--cpu-replicas 4 splits the CPU, but 2 GPU(s) are visible and training mirrors over those: leave out "
            "--cpu-replicas, or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train on CPU replicas"
        )
