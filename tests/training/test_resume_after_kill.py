"""Resuming after SIGKILL: a run killed at any moment, mid-save included, and run again
ends with the weights, optimizer state and random generators' state of one never killed.

Each run is `python train.py` in a subprocess, as a user or a preempting scheduler meets it:
a tiny model with dropout on 300 pairs over two epochs, on one replica with a checkpoint
every step, or on two mirrored CPU replicas (each drawing its own masks) making up to 4
updates a call, which must also end exactly as the same run at one update a call.
(Without BPE-dropout: sentencepiece's sampled segmentations differ from process to process
for the same seed, so two uninterrupted runs with it differ too.)"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from app.model_dir import checkpoints
from app.model_dir.checkpoints import WEIGHTS_ONLY
from tests.tiny_run import ROOT, write_multi30k_slice

# Why the fast tier runs no test of this file (tests/tiers.py).
ALL_SLOW_BECAUSE = "its test trains and kills `python train.py` processes"

STEPS = 24
CHECKPOINT_FILE = r"ckpt-\d+(\.weights)?\.(index|data-.*)"
KEEP = 3
# The ways a run is laid out: its flags, and the steps that have a record (`--log-every`)
# and a checkpoint (`--checkpoint-every`). Two replicas, records every 4 steps and
# checkpoints every 6 make calls of 4 and 2 updates (steps 1-4, 5-6, 7-8, 9-12, ...).
LAYOUTS = {
    "one replica": dict(flags=[], log_every=1, checkpoint_every=1),
    "two replicas, four updates a call": dict(
        flags=["--cpu-replicas", "2", "--steps-per-loop", "4"], log_every=4, checkpoint_every=6
    ),
}


def _command(corpus, model_dir, layout, *extra):
    return [
        sys.executable, "train.py", "--size", "tiny", "--dataset", "files:" + ",".join(corpus),
        "--vocab-size", "400", "--batch-tokens", "512", "--max-length", "48",
        "--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2",
        "--dropout", "0.2", "--attention-dropout", "0.1", "--inner-dropout", "0.1",
        "--train-steps", str(STEPS), "--warmup-steps", "4", "--checkpoint-every", str(layout["checkpoint_every"]),
        "--keep-checkpoints", str(KEEP), "--log-every", str(layout["log_every"]), "--eval-every", "0", "--no-bleu",
        "--time-budget", "0", "--precision", "float32", "--seed", "5", "--model-dir", str(model_dir),
        *layout["flags"], *extra,
    ]


def _start(command, log):
    return subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        stdout=log, stderr=subprocess.STDOUT,
    )


def _kill_when(process, reached, timeout=300):
    """SIGKILLs `process` as soon as `reached()` holds; returns the process's exit code."""
    deadline = time.monotonic() + timeout
    while not reached():
        assert process.poll() is None, f"the run ended (exit code {process.returncode}) before it was to be killed"
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    return process.wait(timeout=60)


def _recorded_step(model_dir, step):
    """Whether metrics.jsonl has step `step`'s record (written after the update, before its save)."""
    def reached():
        try:
            with open(model_dir / "metrics.jsonl") as f:
                return any(json.loads(line).get("step") == step for line in f if line.endswith("\n"))
        except FileNotFoundError:
            return False

    return reached


def _resume_state(path):
    """Every variable of checkpoint `path` a resumed step depends on: all but its wall-clock
    seconds and the count of saves the manager made."""
    reader = tf.train.load_checkpoint(path)
    left_out = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/", "progress/seconds/")
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if not name.startswith(left_out)
    }


def _assert_same_checkpoints(actual_dir, expected_dir):
    """The newest checkpoint holds everything a step depends on, the older ones the weights,
    equal to the last bit; the same files are kept."""
    kept, expected_kept = (checkpoints.checkpoint_paths(d) for d in (actual_dir, expected_dir))
    assert [os.path.basename(p) for p in kept] == [os.path.basename(p) for p in expected_kept]
    expected, actual = _resume_state(expected_kept[-1]), _resume_state(kept[-1])
    assert sorted(actual) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    assert int(actual["progress/step/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS
    assert any(name.startswith("random/") for name in actual) and any(name.startswith("optimizer/") for name in actual)
    # The older ones, kept for averaging: the same weights, and the same files.
    for expected_path, actual_path in zip(expected_kept[:-1], kept[:-1]):
        expected, actual = _resume_state(expected_path), _resume_state(actual_path)
        assert sorted(actual) == sorted(expected) and all(name.startswith("weights/") for name in actual)
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    # Debris a kill may leave besides (TensorFlow's temporary files) aside.
    files = [
        sorted(name for name in os.listdir(d / "checkpoints") if re.fullmatch(CHECKPOINT_FILE, name))
        for d in (actual_dir, expected_dir)
    ]
    assert files[0] == files[1]


@pytest.mark.slow
@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_a_run_killed_at_random_moments_ends_as_one_never_killed(tmp_path, layout_name):
    layout = LAYOUTS[layout_name]
    log_every, checkpoint_every = layout["log_every"], layout["checkpoint_every"]
    corpus = write_multi30k_slice(tmp_path)
    straight_dir, killed_dir, one_dir = tmp_path / "straight", tmp_path / "killed", tmp_path / "one-update-a-call"
    with open(tmp_path / "straight.log", "w") as straight_log, open(tmp_path / "one.log", "w") as one_log:
        straight = _start(_command(corpus, straight_dir, layout), straight_log)  # alongside the killed one
        # Several updates a call: the same run at one update a call, alongside too.
        one = _start(_command(corpus, one_dir, layout, "--steps-per-loop", "1"), one_log) if layout["flags"] else None
        rng = random.Random(63)
        # Just after a recorded step's update, while saving it, or early in the next call;
        # once a checkpoint has been saved.
        records = range(log_every, STEPS // 2, log_every)
        first_kill = rng.choice([step for step in records if step >= 3 and step > checkpoint_every])
        # Between the two writes of a later save, or during the second.
        saved = range(checkpoint_every, STEPS, checkpoint_every)
        second_kill = rng.choice([step for step in saved if first_kill + 2 <= step < STEPS - 1])
        with open(tmp_path / "killed.log", "w") as log:
            killed = _start(_command(corpus, killed_dir, layout), log)
            assert _kill_when(killed, _recorded_step(killed_dir, first_kill)) == -signal.SIGKILL
            # The weights-only copy is written, the full checkpoint not yet, or not wholly.
            copy = killed_dir / "checkpoints" / f"ckpt-{second_kill}{WEIGHTS_ONLY}.index"
            assert not copy.exists()
            killed = _start(_command(corpus, killed_dir, layout), log)
            assert _kill_when(killed, copy.exists) == -signal.SIGKILL
            resumed = _start(_command(corpus, killed_dir, layout), log)
            assert resumed.wait(timeout=300) == 0, (tmp_path / "killed.log").read_text()
        assert straight.wait(timeout=300) == 0, (tmp_path / "straight.log").read_text()
        assert one is None or one.wait(timeout=300) == 0, (tmp_path / "one.log").read_text()

    text = (tmp_path / "killed.log").read_text()
    resumed_at = [int(line.split(" at step ")[1].split()[0]) for line in text.splitlines() if "resumed from" in line]
    assert len(resumed_at) == 2 and 1 <= resumed_at[0] <= first_kill + checkpoint_every, text
    assert resumed_at[1] <= second_kill, text
    kept = [os.path.basename(p) for p in checkpoints.checkpoint_paths(killed_dir)]
    assert kept == [f"ckpt-{step}" for step in [*saved, STEPS][-KEEP:]]
    _assert_same_checkpoints(killed_dir, straight_dir)

    if one is not None:  # one update a call: the same checkpoints, to the last bit
        _assert_same_checkpoints(one_dir, straight_dir)
