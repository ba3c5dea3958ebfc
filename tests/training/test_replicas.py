"""1 replica vs 8 mirrored replicas on the same global batch: the same loss and update;
and with dropout on, a mask of its own on every replica."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.built_once import built_once
from tests.replica_equivalence import OPTIMIZERS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def equivalence_reports(tmp_path_factory):
    """`{optimizer: report}` of tests/replica_equivalence.py: one process for the three, once
    per test run (TensorFlow's start and the tracing it shares are paid once)."""

    def run(directory):
        result = subprocess.run(
            [sys.executable, "-m", "tests.replica_equivalence", *OPTIMIZERS],
            cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            capture_output=True, text=True, timeout=500,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads(line) for line in result.stdout.strip().splitlines()[-len(OPTIMIZERS) :]]

    return {report["optimizer"]: report for report in built_once(tmp_path_factory, "replica-equivalence", run)}


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_eight_replicas_update_the_weights_like_one(equivalence_reports, optimizer):
    # Both runs make the same updates in float32 with their sums in another order (8 partial
    # sums of 2 rows, all-reduced, against one of 16 rows): they differ by rounding alone,
    # bounded here on any x86-64 CPU. u = 2^-24 is float32's unit roundoff; a sum of n terms,
    # in any order, is off by at most (n - 1) u times the sum of its terms' magnitudes.
    report = equivalence_reports[optimizer]
    assert report["replicas"] == 8
    # The loss sums 59 positive token losses, each rounded within a few u: the sum within
    # (n - 1) u = 3.5e-6 of itself in either run, so the two under 1e-5 apart (measured: at
    # most 2e-7). The second loss shows the first update was the same.
    for single, mirrored in report["losses"]:
        assert abs(single - mirrored) < 1e-5 * abs(single)
    # The weights, but the attention key biases: their true gradient is zero, so rounding
    # picks its sign, which Adam's first step, lr * g / |g|, follows in full. They are
    # compared through the outputs (tests/replica_equivalence.py).
    # SGD (lr 0.5) moves a weight by lr times its gradient's rounding: measured 6e-8 to
    # 1.2e-7 on three kernel families of one Intel CPU (oneDNN's AMX and AVX2 code, and
    # Eigen's with TF_ENABLE_ONEDNN_OPTS=0); 1e-5 is 80 times the largest.
    # Adam's step, lr_t m_t / sqrt(v_t) (bias-corrected), does not change with the gradients'
    # scale: gradients changed by a relative delta at most move it by at most 2 delta lr_t
    # (Cauchy-Schwarz over the averages m_t and v_t of the same gradients, beta_1 0.9 and
    # beta_2 0.98, steps 1 to 3). The 3 updates, at lr 0.088, 0.177 and 0.144, part the
    # weights by at most 0.82 delta, and 1e-4 holds for delta up to 1.2e-4, 2,000 u: the
    # relative rounding of a gradient summed over 59 tokens stays far under that unless it
    # nearly cancels to zero, as the key biases' does. Measured: 3.4e-6 to 1.1e-5 on the
    # three kernel families above, and under 1e-4 on a 2-core AMD EPYC (AVX-512, bfloat16).
    assert report["max_weight_difference"] < (1e-5 if optimizer == "sgd" else 1e-4)
    # The outputs differ by what the weights' differences make of them to first order
    # (d output / dw . dw over every weight but the key biases) and by float32 rounding:
    # the key biases' shift of scores that the softmax ignores, and the logits' own
    # rounding (|logit| < 5, spaced 4.8e-7 apart in float32). Measured beyond first order:
    # 0.8e-6 to 3.7e-6 on the three kernel families, where the output differences
    # themselves, 2.8e-5 to 1.6e-4 with Adam, follow the weights' up to 30 times larger
    # (the EPYC's were 5.95e-4 apart, its weights in bound); 1e-5 is 2.7 times the largest.
    assert report["output_beyond_first_order"] < 1e-5
    # Each replica updates its own copy from the same reduced gradients: the copies must
    # not differ at all (a checkpoint saves the first; a resumed run would otherwise differ).
    assert report["replica_differences"] == {}


@pytest.mark.slow
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
