"""`app.cli.threads`: TensorFlow's thread pools, set once, before its first op."""

import pytest
import tensorflow as tf

from app.cli.threads import describe_cpu_threads, set_cpu_threads


def test_a_negative_count_names_its_flag():
    with pytest.raises(ValueError, match=r"--inter-op-threads must be 0 \(TensorFlow's choice\) or more, got -2"):
        set_cpu_threads(inter_op=-2)


def test_once_tensorflow_has_started_another_pool_size_is_a_clear_error():
    tf.constant(1.0) + 1.0  # TensorFlow has started, if no other test started it before
    current = tf.config.threading.get_intra_op_parallelism_threads()
    with pytest.raises(ValueError, match=r"TensorFlow started before its threads could be set"):
        set_cpu_threads(intra_op=current + 13)
    # The pools TensorFlow started with stay as they were.
    assert tf.config.threading.get_intra_op_parallelism_threads() == current


def test_none_leaves_the_pools_alone():
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    set_cpu_threads(None, None)
    assert tf.config.threading.get_intra_op_parallelism_threads() == intra
    assert tf.config.threading.get_inter_op_parallelism_threads() == inter


def test_the_log_line_names_tensorflows_own_choice():
    if tf.config.threading.get_intra_op_parallelism_threads() or tf.config.threading.get_inter_op_parallelism_threads():
        pytest.skip("this process set its own pools")
    assert describe_cpu_threads() == (
        "CPU threads: every core per op (TensorFlow's choice), one op per core at once (TensorFlow's choice)"
    )
