"""What benchmarks/gpu/train_jax.py's sweep reports: its pace, and the scores and length of
what it decoded.

- Pace: a session's device time once ended a sweep a few seconds before its only
  evaluation, at step 16,000, when the sweep logged nothing after step 1,000: the call
  came back with no figure at all.
- Scores: the sweep decodes greedily and scores with sacreBLEU; the length ratio beside
  BLEU is what the lab notebook found the gap to the published figure to be made of
  (docs/lab-notebook/2026-11-24-en-de-where-a-point-of-the-gap-goes.md). A fake greedy
  decoder and tokenizer give outputs known by hand.

Runs where JAX is installed; skipped elsewhere, as CI is.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from layers.special_tokens import END_ID

ROOT = Path(__file__).resolve().parents[2]

WORDS = {3: "ein", 4: "hund", 5: "zwei", 6: "katzen", 7: "laufen", 8: "schnell"}


@pytest.fixture
def train_jax(monkeypatch):
    """The sweep's module, imported under the JAX backend."""
    pytest.importorskip("jax")
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    monkeypatch.delitem(sys.modules, "train_jax", raising=False)
    import train_jax

    return train_jax


def test_the_sweep_logs_its_pace_early_and_then_every_2000_steps(train_jax):
    logged = [step for step in range(1, 9001) if train_jax.reports_pace(step)]
    assert logged == [100, 1000, 2000, 4000, 6000, 8000]


class WordsTokenizer:
    """Decodes ids to the words of WORDS, one word an id."""

    def decode(self, ids):
        return " ".join(WORDS[i] for i in ids)


def test_validation_bleu_scores_the_text_before_the_end_token_and_its_length(train_jax):
    sacrebleu = pytest.importorskip("sacrebleu")
    # Row 0 says "ein hund" and ends; what follows its end token must not count. Row 1
    # never ends: all of it counts (padding, id 0, is not text).
    decoded = np.array([[3, 4, END_ID, 8, 8], [5, 6, 7, 8, 0]], np.int32)

    def greedy(trainable, non_trainable, batch, max_lengths):
        assert batch.shape[0] == 2 and list(max_lengths) == [52, 53]  # input + 50
        return decoded

    references = ["Ein Hund läuft", "Zwei Katzen laufen schnell"]
    cased, lowercased, length, hypotheses = train_jax.validation_bleu(
        greedy, (None, None), [[10, 11], [12, 13, 14]], references, WordsTokenizer()
    )
    assert hypotheses == ["ein hund", "zwei katzen laufen schnell"]
    assert length == 6 / 7  # 13a tokens: 2 + 4 against 3 + 4
    assert cased == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert lowercased == sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert cased < lowercased  # "Ein", "Zwei" and "Katzen" match only lowercased
