"""A preparation killed mid-split keeps its finished shards and resumes to the same result."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data.shards import PROGRESS

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 3_000


def _corpus(directory):
    """3,000 pairs of short, distinct sentences (a few too long for max_length 64)."""
    words = "the a cat dog sees runs house red blue small big man woman child eats bread water".split()
    german = "die eine katze hund sieht rennt haus rot blau klein gross mann frau kind isst brot wasser".split()
    lines = {"en": [], "de": []}
    for i in range(PAIRS):
        count = 3 + i % 9 + (60 if i % 500 == 7 else 0)
        lines["en"].append(" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(count)) + f" {i}")
        lines["de"].append(" ".join(german[(i * 5 + k * 2) % len(german)] for k in range(count)) + f" {i}")
    for lang, text in lines.items():
        (directory / f"train.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    return str(directory / "train")


def _prepare(prefix, model_dir, seconds_per_chunk=0.0, **popen):
    command = [sys.executable, "-m", "tests.data.slow_preparation", prefix, str(model_dir), str(seconds_per_chunk)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def _prepare_here(prefix, model_dir, vocabulary_cache, monkeypatch):
    """The preparation never killed, run in this process; returns its output. It is what the
    killed one is compared with, not what is tested, and a process of its own costs
    TensorFlow's start (about 4 s of CPU). `vocabulary_cache`, a directory of its own, makes
    it train its vocabulary, as its own process did beside the killed one."""
    import data.prepare
    from tests.data import slow_preparation

    for name in ("_CHUNK", "SHARD_PAIRS", "_encode_chunk"):  # restored when the test ends
        monkeypatch.setattr(data.prepare, name, getattr(data.prepare, name))
    monkeypatch.setenv("TRANSFORMER_VOCAB_CACHE", str(vocabulary_cache))
    lines = []
    slow_preparation.main(prefix, str(model_dir), log=lines.append)
    return "\n".join(lines)


def _files(directory):
    return {path.name: path.read_bytes() for path in sorted(Path(directory).iterdir())}


@pytest.mark.slow
def test_a_preparation_killed_mid_split_resumes_from_its_last_shard_to_the_same_result(tmp_path, monkeypatch):
    prefix = _corpus(tmp_path)
    straight_dir, killed_dir = tmp_path / "straight", tmp_path / "killed"

    # Killed once two shards (600 pairs) are checkpointed: a few chunks past them are
    # written too, and must be cut away.
    killed = _prepare(prefix, killed_dir, seconds_per_chunk=0.2)
    progress = killed_dir / "data" / ".train.resumable" / PROGRESS
    deadline = time.monotonic() + 240
    while not (progress.exists() and json.loads(progress.read_text())["state"]["consumed"] >= 600):
        assert killed.poll() is None, killed.stdout.read()
        assert time.monotonic() < deadline, "the preparation did not get two shards in"
        time.sleep(0.05)
    time.sleep(0.5)  # a chunk or two more, past the checkpoint
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    kept = json.loads(progress.read_text())["state"]["consumed"]
    assert kept % 300 == 0 and kept >= 600

    resumed = _prepare(prefix, killed_dir)
    straight_output = _prepare_here(prefix, straight_dir, tmp_path / "vocabulary-cache", monkeypatch)  # meanwhile
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output
    assert f"prepare train: resuming after the {kept:,} pairs an interrupted preparation left prepared" in output
    # Train's pairs after the last shard, then validation's 30 (held out of train): all but `kept`.
    assert f"tokenized {PAIRS - kept} pairs" in output
    assert f"tokenized {PAIRS} pairs" in straight_output

    # The same vocabulary, and every split the same to the byte; no checkpoint left behind.
    assert _files(killed_dir / "data" / "train") == _files(straight_dir / "data" / "train")
    assert _files(killed_dir / "data" / "validation") == _files(straight_dir / "data" / "validation")
    assert sorted(os.listdir(killed_dir / "data")) == ["train", "validation"]
    assert (killed_dir / "subwords.model").read_bytes() == (straight_dir / "subwords.model").read_bytes()
    manifest = json.loads((killed_dir / "data" / "train" / "manifest.json").read_text())
    assert manifest["read"] == PAIRS - 30 and manifest["dropped_too_long"] > 0


@pytest.mark.parametrize("change", ["settings", "none"])
def test_a_checkpoint_of_other_settings_is_not_resumed(tmp_path, change):
    from data.shards import SplitWriter

    import numpy as np

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with SplitWriter(str(data_dir), "train", 300, 64, resume_key={"vocab": 300}) as writer:
            writer.append(np.arange(4), np.array([2, 2]), np.arange(6), np.array([3, 3]))
            writer.checkpoint({"consumed": 2})
            writer.append(np.arange(4), np.array([2, 2]), np.arange(6), np.array([3, 3]))
            raise KeyboardInterrupt
    key = {"vocab": 300} if change == "none" else {"vocab": 400}
    with SplitWriter(str(data_dir), "train", 300, 64, resume_key=key) as writer:
        if change == "none":
            assert (writer.resumed, writer.pairs) == ({"consumed": 2}, 2)  # the pairs after it cut away
        else:
            assert (writer.resumed, writer.pairs) == (None, 0)  # made from other settings: afresh
        writer.commit({"split": "train"})
    manifest = json.loads((data_dir / "train" / "manifest.json").read_text())
    assert manifest["pairs"] == (2 if change == "none" else 0)
    assert sorted(os.listdir(data_dir / "train")) == [
        "lengths", "manifest.json", "source.ids", "source.offsets", "target.ids", "target.offsets"
    ]
