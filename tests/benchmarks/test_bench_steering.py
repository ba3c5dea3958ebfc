"""benchmarks/bench_steering.py: how it draws constraints, its flags, and a tiny run."""

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_steering import parse_args, reference_phrases

ROOT = Path(__file__).resolve().parents[2]


def test_constraints_are_reference_phrases_the_translation_lacks_drawn_without_overlap():
    reference = "Ein Mann mit rotem Hut fährt Fahrrad."
    translation = "Ein Mann fährt ein Rad."
    for seed in range(20):
        phrases = reference_phrases(reference, translation, 2, random.Random(seed))
        assert len(phrases) == 2
        words = [phrase.split() for phrase in phrases]
        # Each phrase: 1-3 consecutive words of the reference, its edges' punctuation off,
        # that the translation lacks (lowercased).
        for phrase, phrase_words in zip(phrases, words):
            assert 1 <= len(phrase_words) <= 3 and phrase in "Ein Mann mit rotem Hut fährt Fahrrad"
            assert phrase.lower() not in translation.lower()
        # Not overlapping: no word of the reference is in both (here every word occurs once).
        assert not set(words[0]) & set(words[1])
    assert reference_phrases(reference, translation, 1, random.Random(3)) == reference_phrases(
        reference, translation, 1, random.Random(3)
    )
    # A translation that holds every word and phrase of the reference gets none.
    assert reference_phrases("Ein Hund.", "Ein Hund rennt.", 2, random.Random(0)) == []


@pytest.mark.parametrize("flags, message", [
    (["--also", "seed2"], "--also 'seed2': give NAME=PATH"),
    (["--also", "=exports/b"], "--also '=exports/b': give NAME=PATH"),
    (["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    (["--split", "train"], "argument --split: invalid choice: 'train'"),
])
def test_a_bad_flag_is_refused_by_name(flags, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--saved-model", "exports/a", *flags])
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_run_prints_every_configuration_against_beam_search(exported):
    # Its own process: it sets TensorFlow's thread pools, which a started runtime refuses.
    _, base, path, _ = exported
    command = [
        sys.executable, str(ROOT / "benchmarks" / "bench_steering.py"), "--saved-model", base,
        "--also", f"same export={path}", "--sentences", "6", "--rounds", "1", "--batch-size", "4",
        "--chunk-sentences", "3",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    names = [row.split(" | ")[0][2:] for row in rows[1:]]
    assert names == [
        "beam search", "constrained, nothing set", "1 constraint", "2 constraints",
        "prefix: reference's first 2 words", "no_repeat_ngram_size 3", "same export",
    ]
    by_name = dict(zip(names, rows[1:]))
    # The tiny model writes none of the reference's words unforced: every sentence gets phrases,
    # and every one of them appears.
    assert re.search(r"\| 100\.0% / 100\.0% of 6 \|", by_name["2 constraints"])
    # The same export as --also translates as beam search does: the same BLEU.
    assert by_name["same export"].split(" | ")[1:3] == by_name["beam search"].split(" | ")[1:3]
