"""The examples in examples/ run and print what the export and the server answer."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import SENTENCES

# Why the fast tier runs no test of this file (tests/tiers.py).
ALL_SLOW_BECAUSE = "each example runs in a process of its own against the suite's export or server"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Sentences of the shared export's test set that print on one line each.
SHOWN = [SENTENCES[0], SENTENCES[3], SENTENCES[4]]


def _run(example, *args, cwd):
    command = [sys.executable, os.path.join(ROOT, "examples", example), *args]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def _block(lines, heading):
    """The indented lines under `heading`."""
    start = lines.index(heading) + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def _expected(exported, key):
    _, _, _, outputs = exported
    return [outputs[key][SENTENCES.index(sentence)] for sentence in SHOWN]


@pytest.mark.slow
def test_the_savedmodel_example_prints_each_signatures_answer(exported, tmp_path):
    _, _, path, _ = exported
    # From another directory and without this project on the path: it needs only TensorFlow
    # and tensorflow-text.
    lines = _run("savedmodel_in_python.py", path, *SHOWN, cwd=tmp_path)
    translations = [text.decode("utf-8") for text in _expected(exported, "translations")]
    scores = _expected(exported, "scores")
    assert _block(lines, "serving_default") == [
        f"  {score:8.4f}  {translation}" for translation, score in zip(translations, scores)
    ]
    nbest = _block(lines, "nbest")
    assert [line.strip() for line in nbest if not line.startswith("    ")] == SHOWN
    assert sum(line.startswith("    1. ") for line in nbest) == len(SHOWN)
    assert len(_block(lines, "greedy")) == len(SHOWN)
    assert len(_block(lines, "translate_with_options (alpha 1.0, at most 10 tokens more than the input)")) == len(SHOWN)
    assert np.all(np.isfinite(scores))


@pytest.mark.slow
def test_the_rest_example_prints_the_servers_answers(exported, tiny_server, tmp_path):
    # The run's shared server (conftest.py): the example only sends it requests.
    lines = _run("rest_api_client.py", tiny_server.url, *SHOWN, cwd=tmp_path)
    translations = [text.decode("utf-8") for text in _expected(exported, "translations")]
    scores = _expected(exported, "scores")
    assert _block(lines, "serving_default (row format)") == [
        f"  {score:8.4f}  {translation}" for translation, score in zip(translations, scores)
    ]
    assert len(_block(lines, "nbest (columnar format)")) == len(SHOWN)
    assert len(_block(lines, "translate_with_options (alpha 1.0)")) == len(SHOWN)
    assert lines[-1].startswith("a bad request: HTTP 400: ") and "no_such_signature" in lines[-1]
