"""`python train.py --strategy multi-worker`: two worker processes on 127.0.0.1.

The real check: two workers with one replica each train exactly like one process with
two mirrored CPU replicas (`--cpu-replicas 2`) on the same data and seed, through a fresh
start (2 steps) and a resume by both workers (to step 4).

    python -m pytest tests/training/test_multi_worker.py
"""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from app.training.strategy import check_tf_config, is_chief

ROOT = Path(__file__).resolve().parents[2]
# Seconds one launch (both workers, or workers and reference together) may take. A tiny
# run needs well under a minute of CPU; the margin is for a busy machine.
TIMEOUT = 300
# Dropout on: worker w's replica draws the masks of replica w of one process (the global
# replica index), and a resumed run the masks it would have drawn (checkpointed state).
# The precision given, as a cluster must (`--precision auto` times bfloat16 products in
# each process, about 5 s of CPU, and could answer differently on a busy machine).
TINY = [
    "--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2", "--dropout", "0.1",
    "--vocab-size", "300", "--batch-tokens", "512", "--eval-every", "0", "--no-bleu", "--seed", "1",
    "--precision", "float32",
    # A budget the run fits in: its pace is agreed on by the workers at every record,
    # a collective that must not change what they train.
    "--time-budget", "60", "--log-every", "1",
]
ADDRESS = "127.0.0.1"


# ---------------------------------------------------------------------------------------
# Which worker is the chief.


@pytest.mark.parametrize(
    "cluster, task, expected",
    [
        ({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 0}, True),
        ({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 1}, False),
        ({"chief": ["a:1"], "worker": ["b:2"]}, {"type": "chief", "index": 0}, True),
        ({"chief": ["a:1"], "worker": ["b:2"]}, {"type": "worker", "index": 0}, False),
    ],
)
def test_the_chief_is_the_chief_task_or_else_worker_0(monkeypatch, cluster, task, expected):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert is_chief(SimpleNamespace(cluster_resolver=resolver)) is expected


WORKERS = {"worker": ["a:1", "b:2"]}


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{", "is not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        ("[]", 'must be a JSON object with "cluster" and "task"'),
        ('"x"', 'must be a JSON object with "cluster" and "task"'),
        ('{"task": {"type": "worker", "index": 0}}', 'needs "cluster", an object of job name -> list of "host:port"'),
        ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}',
         "has cluster job 'worker' as \"a:1\", not a list of \"host:port\" strings"),
        (json.dumps({"cluster": WORKERS}),
         'needs "task", an object {"type": <a job of the cluster>, "index": <its number>}'),
        (json.dumps({"cluster": WORKERS, "task": {"type": "chief", "index": 0}}),
         "has task type 'chief', which is not a job of the cluster ('worker')"),
        (json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": 2}}),
         "has task index 2; job 'worker' has tasks 0 to 1"),
        (json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": "0"}}),
         "has task index '0'; job 'worker' has tasks 0 to 1"),
    ],
)
def test_a_tf_config_tensorflow_cannot_use_is_named_before_it_is_used(text, problem):
    with pytest.raises(ValueError) as error:
        check_tf_config(text)
    assert str(error.value) == f"TF_CONFIG {problem}: {text!r}"


def test_a_tf_config_of_workers_or_a_chief_and_workers_passes():
    check_tf_config(json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": 1}}))
    chief_and_worker = {"chief": ["a:1"], "worker": ["b:2"]}
    check_tf_config(json.dumps({"cluster": chief_and_worker, "task": {"type": "chief", "index": 0}}))


def test_a_single_process_is_the_chief():
    assert is_chief(tf.distribute.get_strategy())


# ---------------------------------------------------------------------------------------
# Two workers against one process with two replicas.


def write_corpus(directory):
    """200 training and 20 validation pairs of a toy en->de word mapping."""
    rng = random.Random(0)
    english = "the a cat dog sees runs house red blue small big man woman child eats bread water".split()
    german = "die eine katze hund sieht rennt haus rot blau klein gross mann frau kind isst brot wasser".split()
    paths = []
    for split, count in (("train", 200), ("valid", 20)):
        sentences = [[rng.randrange(len(english)) for _ in range(rng.randint(3, 12))] for _ in range(count)]
        for lang, words in (("en", english), ("de", german)):
            path = directory / f"{split}.{lang}"
            path.write_text("".join(" ".join(words[i] for i in s) + "\n" for s in sentences), encoding="utf-8")
            paths.append(str(path))
    return "files:" + ",".join(paths)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind((ADDRESS, 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Launch:
    """`train.py` processes started together, their output in files."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.processes = {}  # name -> (Popen, log path)

    def start(self, name, args, **env):
        log = self.log_dir / f"{name}.log"
        environment = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        environment.update(TF_CPP_MIN_LOG_LEVEL="3", **env)
        with open(log, "w") as output:
            process = subprocess.Popen(
                [sys.executable, "train.py", *args], cwd=ROOT, env=environment,
                stdout=output, stderr=subprocess.STDOUT,
            )
        self.processes[name] = (process, log)

    def start_workers(self, args, model_dir, tasks, scratch, task_args=None, **env):
        """One worker per TF_CONFIG task, e.g. [("worker", 0), ("worker", 1)]; scratch: TMPDIRs.

        task_args: more flags for each task, in the order of `tasks` (None: none).
        env: more environment variables for every worker.
        """
        cluster = {}
        for kind, _ in tasks:
            cluster.setdefault(kind, []).append(None)
        ports = iter(free_ports(len(tasks)))
        cluster = {kind: [f"{ADDRESS}:{next(ports)}" for _ in hosts] for kind, hosts in cluster.items()}
        for (kind, index), tmp, extra in zip(tasks, scratch, task_args or [[]] * len(tasks)):
            tmp.mkdir(exist_ok=True)
            config = json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})
            self.start(
                f"{kind}{index}", ["--strategy", "multi-worker", *args, *extra, "--model-dir", str(model_dir)],
                TF_CONFIG=config, TMPDIR=str(tmp), **env,
            )

    def wait(self, expect_success=True):
        """Waits for every process; kills them all and fails if one runs past TIMEOUT."""
        deadline = time.monotonic() + TIMEOUT
        try:
            for process, _ in self.processes.values():
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            for process, _ in self.processes.values():
                process.kill()
                process.wait()
            pytest.fail(f"train.py ran past {TIMEOUT} s (killed)\n{self.output()}")
        failed = [name for name, (process, _) in self.processes.items() if process.returncode != 0]
        if expect_success:
            assert not failed, f"{failed} failed\n{self.output()}"
        return failed

    def log(self, name):
        return self.processes[name][1].read_text(errors="replace")

    def output(self):
        return "\n".join(f"===== {name} =====\n{self.log(name)[-6000:]}" for name in self.processes)


def checkpoint_weights(path):
    reader = tf.train.load_checkpoint(str(path))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("weights/")]
    return {n: reader.get_tensor(n) for n in names}


@pytest.mark.slow
def test_two_workers_train_like_one_process_with_two_replicas(tmp_path):
    data = ["--dataset", write_corpus(tmp_path)]
    reference_dir, model_dir = tmp_path / "reference", tmp_path / "multi-worker"
    scratch = [tmp_path / "tmp0", tmp_path / "tmp1"]

    # Fresh start: the reference runs all 4 steps meanwhile.
    first = Launch(tmp_path)
    first.start(
        "reference", [*data, *TINY, "--cpu-replicas", "2", "--train-steps", "4", "--model-dir", str(reference_dir)]
    )
    first.start_workers([*data, *TINY, "--train-steps", "2"], model_dir, [("worker", 0), ("worker", 1)], scratch)
    first.wait()
    assert (model_dir / "checkpoints" / "ckpt-2.index").exists(), first.output()

    # Resume to step 4, this time with a "chief" task: both restore the chief's step 2.
    second = Launch(tmp_path / "resume")
    second.log_dir.mkdir()
    second.start_workers([*data, *TINY, "--train-steps", "4"], model_dir, [("chief", 0), ("worker", 0)], scratch)
    second.wait()
    for name in ("chief0", "worker0"):
        assert "resumed from" in second.log(name) and "at step 2" in second.log(name), second.output()

    # Only the chief wrote to the model directory, and the other worker cleaned up.
    assert (model_dir / "checkpoints" / "ckpt-4.index").exists(), second.output()
    assert sorted(p.name for p in model_dir.iterdir()) == [
        "best", "checkpoints", "data", "metrics.jsonl", "settings.json", "subwords.model", "train"
    ]
    records = [json.loads(line) for line in open(model_dir / "metrics.jsonl")]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in records if "valid_loss" in r] == [2, 4]
    for tmp in scratch:
        assert list(tmp.iterdir()) == [], f"{tmp} left behind"

    # The real check: the same weights as one process with two replicas.
    expected = checkpoint_weights(reference_dir / "checkpoints" / "ckpt-4")
    actual = checkpoint_weights(model_dir / "checkpoints" / "ckpt-4")
    assert expected.keys() == actual.keys() and expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_workers_in_different_precisions_stop_before_training_and_say_so(tmp_path):
    # `--precision auto` resolves per machine, so a cluster of unlike CPUs could disagree.
    launch = Launch(tmp_path)
    launch.start_workers(
        ["--dataset", write_corpus(tmp_path), *TINY, "--train-steps", "2"],
        tmp_path / "multi-worker",
        [("worker", 0), ("worker", 1)],
        [tmp_path / "tmp0", tmp_path / "tmp1"],
        task_args=[["--precision", "float32"], ["--precision", "mixed_bfloat16"]],
    )
    assert launch.wait(expect_success=False) == ["worker0", "worker1"], launch.output()
    for name in ("worker0", "worker1"):
        log = launch.log(name)
        assert "error: the workers disagree on the precision" in log and "[0, 2]" in log, launch.output()
        assert "--precision auto depends on each CPU" in log and "Traceback" not in log, launch.output()
    assert not (tmp_path / "multi-worker" / "checkpoints").exists(), launch.output()


# ---------------------------------------------------------------------------------------
# Stopping on SIGTERM or Ctrl-C: every worker stops at the same step and saves it.


def wait_for_line(launch, name, text, timeout=TIMEOUT):
    """Waits until the log of process `name` holds `text`; fails if it ends or times out first."""
    process, _ = launch.processes[name]
    deadline = time.monotonic() + timeout
    while text not in launch.log(name):
        if process.poll() is not None or time.monotonic() > deadline:
            for other, _ in launch.processes.values():
                other.kill()
                other.wait()
            pytest.fail(f"{name} never wrote {text!r}\n{launch.output()}")
        time.sleep(0.05)


def interrupted_step(log):
    """The step of the log's "interrupted at step N; saved ..." line."""
    match = re.search(r"interrupted at step (\d+); saved", log)
    return int(match.group(1)) if match else None


@pytest.mark.slow
@pytest.mark.parametrize("both", [False, True], ids=["one worker", "both, apart"])
def test_a_sigterm_to_some_workers_stops_all_at_one_step_with_its_checkpoint(tmp_path, both):
    # Each worker notices its signal between steps, at its own moment; one saving (a
    # collective) while another trains the next step (another) would hang or crash both.
    launch = Launch(tmp_path)
    launch.start_workers(
        ["--dataset", write_corpus(tmp_path), *TINY, "--train-steps", "100000", "--checkpoint-every", "0"],
        tmp_path / "multi-worker",
        [("worker", 0), ("worker", 1)],
        [tmp_path / "tmp0", tmp_path / "tmp1"],
        PYTHONUNBUFFERED="1",  # the chief's progress lines as they come, to signal mid-run
    )
    wait_for_line(launch, "worker0", "step 3/")
    worker0, worker1 = (launch.processes[name][0] for name in ("worker0", "worker1"))
    if both:
        # worker1's signal comes half a second after worker0's. Held stopped meanwhile, it
        # takes its signal before it can have saved and left training, where the signal
        # would end it (exit -15), whatever this machine's pace.
        worker1.send_signal(signal.SIGSTOP)
        worker0.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        worker1.send_signal(signal.SIGTERM)
        worker1.send_signal(signal.SIGCONT)
    else:
        worker1.send_signal(signal.SIGTERM)
    assert launch.wait(expect_success=False) == ["worker0", "worker1"], launch.output()
    assert [worker0.returncode, worker1.returncode] == [130, 130], launch.output()
    step = interrupted_step(launch.log("worker0"))
    assert step is not None and step >= 3 and interrupted_step(launch.log("worker1")) == step, launch.output()
    checkpoints = tmp_path / "multi-worker" / "checkpoints"
    assert tf.train.latest_checkpoint(str(checkpoints)) == str(checkpoints / f"ckpt-{step}"), launch.output()
    reader = tf.train.load_checkpoint(str(checkpoints / f"ckpt-{step}"))
    assert reader.get_tensor("progress/step/.ATTRIBUTES/VARIABLE_VALUE") == step
