"""`app.runtime.threads`: TensorFlow's thread pools, set once, before its first op."""

import importlib
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from app.runtime.threads import describe_cpu_threads, set_cpu_threads

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


SET_FROM_FLAGS = """
import argparse, io, sys
import tensorflow as tf
from app.cli.flags import add_thread_arguments, cpu_threads_from_args
parser = argparse.ArgumentParser()
add_thread_arguments(parser)
stream = io.StringIO()
cpu_threads_from_args(parser.parse_args(sys.argv[1:])).apply(stream)
print(tf.config.threading.get_intra_op_parallelism_threads(), tf.config.threading.get_inter_op_parallelism_threads())
print(stream.getvalue(), end="")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, lines",
    [
        (["--intra-op-threads", "1", "--inter-op-threads", "2"], ["1 2", "CPU threads: 1 per op, 2 ops at once"]),
        (["--inter-op-threads", "1"], ["0 1", "CPU threads: every core per op (TensorFlow's choice), 1 ops at once"]),
        ([], ["0 0"]),  # TensorFlow's choice, and nothing said
    ],
)
def test_a_commands_thread_flags_size_the_pools_and_say_so(flags, lines):
    # A process of its own: TensorFlow's pools are made once per process, at its first op.
    command = [sys.executable, "-c", SET_FROM_FLAGS, *flags]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines() == lines


@pytest.mark.parametrize("command", ["app.commands.evaluate", "app.commands.score", "app.commands.translate"])
def test_every_decoding_command_takes_the_thread_flags(command, capsys):
    parse_args = importlib.import_module(command).parse_args
    flags = {"app.commands.evaluate": ["--split", "test"], "app.commands.score": ["--source", "s", "--target", "t"]}
    flags = flags.get(command, [])
    with pytest.raises(SystemExit) as exit_:
        parse_args([*flags, "--inter-op-threads", "1", "--intra-op-threads", "-1"])
    assert exit_.value.code == 2
    assert "error: argument --intra-op-threads: must be at least 0, got -1" in capsys.readouterr().err
