"""benchmarks/gpu/train_jax.py's validation scores: BLEU and the length of what it scored.

The sweep decodes greedily and scores with sacreBLEU; the length ratio beside BLEU is
what docs/results.md found the gap to the published figure to be made of. A fake greedy
decoder and tokenizer give outputs known by hand. Runs where JAX is installed; skipped
elsewhere, as CI is.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

WORDS = {3: "ein", 4: "hund", 5: "zwei", 6: "katzen", 7: "laufen", 8: "schnell"}
END_ID = 2


class WordsTokenizer:
    """Decodes ids to the words of WORDS, one word an id."""

    def decode(self, ids):
        return " ".join(WORDS[i] for i in ids)


def test_validation_bleu_scores_the_text_before_the_end_token_and_its_length(monkeypatch):
    pytest.importorskip("jax")
    sacrebleu = pytest.importorskip("sacrebleu")
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    monkeypatch.delitem(sys.modules, "train_jax", raising=False)
    import train_jax

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
