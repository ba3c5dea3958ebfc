"""Paired bootstrap resampling (app/evaluation/significance.py), which the export's choice of
alpha rests on.

The best system of each fixture is the references themselves: BLEU 100 on every resample.
A system that differs on some sentences then scores below 100 exactly in the resamples
that draw one of them, so its p-value is the share of resamples that draw none, counted
here from the same draw (`default_rng(SEED).choice`, as sacreBLEU's paired-bs).
"""

import numpy as np
import pytest
import sacrebleu

from app.evaluation import significance
from app.evaluation.significance import (
    CONFIDENCE,
    RESAMPLES,
    SEED,
    bleu_statistics,
    p_not_below,
    resample_counts,
    resampled_bleu,
    significantly_below,
)

REFERENCES = [f"sentence number {i} of the ten in this fixture" for i in range(10)]


def with_wrong(indices):
    """The references, with the sentences at `indices` replaced by a wrong translation."""
    return ["nothing like it" if i in indices else reference for i, reference in enumerate(REFERENCES)]


def share_drawing_none_of(indices, sentences=len(REFERENCES)):
    """The share of the `RESAMPLES` draws of `SEED` that hold none of `indices`."""
    draws = np.random.default_rng(SEED).choice(sentences, size=(RESAMPLES, sentences), replace=True)
    return float(np.mean(~np.isin(draws, list(indices)).any(axis=1)))


def test_the_statistics_sum_to_sacrebleu_s_corpus_bleu():
    hypotheses = ["The cat sat on the mat .", "a dog", "Hello there, World!"]
    references = ["the cat sat on a mat.", "a dog runs in the park", "Hello world!"]
    everything = np.ones((1, 3), dtype=np.int64)
    for lowercase in (False, True):
        statistics = bleu_statistics(hypotheses, references, lowercase)
        assert statistics.shape == (3, 10) and statistics.dtype == np.int64
        expected = sacrebleu.metrics.BLEU(lowercase=lowercase).corpus_score(hypotheses, [references]).score
        assert resampled_bleu(statistics, everything).tolist() == [expected]
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        bleu_statistics(hypotheses, references[:2])


def test_a_resample_draws_sacrebleu_s_indices_with_replacement():
    counts = resample_counts(10)
    assert counts.shape == (RESAMPLES, 10) and (counts.sum(axis=1) == 10).all()
    # sacreBLEU's draw (`_paired_bs_test`), counted per row.
    draws = np.random.default_rng(SEED).choice(10, size=(RESAMPLES, 10), replace=True)
    np.testing.assert_array_equal(counts, [np.bincount(row, minlength=10) for row in draws])
    # Some sentences drawn twice or more, some not at all.
    assert counts.max() >= 2 and (counts == 0).any()
    np.testing.assert_array_equal(resample_counts(10, 5, seed=1), resample_counts(10, 5, seed=1))
    assert not np.array_equal(resample_counts(10, 5, seed=1), resample_counts(10, 5, seed=2))
    with pytest.raises(ValueError, match="at least one resample is needed, got 0"):
        resample_counts(10, 0)


def test_two_identical_systems_tie_on_every_resample():
    statistics = bleu_statistics(with_wrong({3}), REFERENCES)
    assert p_not_below(statistics, statistics.copy()) == 1.0
    assert not significantly_below(1.0)


def test_a_system_worse_on_every_sentence_is_below_on_every_resample():
    best = bleu_statistics(REFERENCES, REFERENCES)
    worse = bleu_statistics(with_wrong(set(range(10))), REFERENCES)
    assert p_not_below(worse, best) == 0.0
    assert significantly_below(0.0)


def test_a_system_wrong_on_one_sentence_of_ten_is_within_noise():
    best = bleu_statistics(REFERENCES, REFERENCES)
    p = p_not_below(bleu_statistics(with_wrong({4}), REFERENCES), best)
    # About 0.9 ** 10 = 0.35 of the resamples miss sentence 4; exactly, those of this draw.
    assert p == share_drawing_none_of({4}) and 0.3 < p < 0.4
    assert not significantly_below(p)


def test_a_system_wrong_on_four_sentences_of_ten_is_significantly_below():
    best = bleu_statistics(REFERENCES, REFERENCES)
    p = p_not_below(bleu_statistics(with_wrong({0, 2, 5, 9}), REFERENCES), best)
    # About 0.6 ** 10 = 0.006.
    assert p == share_drawing_none_of({0, 2, 5, 9}) and 0 < p <= 1 - CONFIDENCE
    assert significantly_below(p)


def test_the_p_value_is_fixed_by_the_seed():
    best = bleu_statistics(REFERENCES, REFERENCES)
    other = bleu_statistics(with_wrong({1, 7}), REFERENCES)
    p = p_not_below(other, best)
    assert p == p_not_below(other, best) == share_drawing_none_of({1, 7})
    assert p_not_below(other, best, seed=7) == float(
        np.mean(~np.isin(np.random.default_rng(7).choice(10, size=(RESAMPLES, 10)), [1, 7]).any(axis=1))
    )
    assert p_not_below(other, best, resamples=3) * 3 in (0, 1, 2, 3)
    with pytest.raises(ValueError, match=r"shape \(9, 10\) against \(10, 10\): not the same sentences"):
        p_not_below(other[:9], best)


def test_significance_is_decided_at_the_stated_confidence():
    assert significance.CONFIDENCE == 0.95
    # The best beats it in 950 of 1,000 resamples: significant; in 949: not.
    assert significantly_below(50 / 1000) and not significantly_below(51 / 1000)
    assert significantly_below(0.1, confidence=0.9) and not significantly_below(0.1)
