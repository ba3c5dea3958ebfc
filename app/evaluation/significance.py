"""Whether one system's BLEU is significantly below another's: paired bootstrap resampling.

    best = bleu_statistics(best_hypotheses, references)          # int64 [N, 10]
    other = bleu_statistics(other_hypotheses, references)
    p = p_not_below(other, best)                                 # share of resamples
    significantly_below(p)                                       # p <= 1 - CONFIDENCE

Koehn's test ("Statistical Significance Tests for Machine Translation Evaluation", 2004),
drawn as sacreBLEU's `--paired-bs` draws it (`sacrebleu/significance.py`,
`_paired_bs_test`): `RESAMPLES` sets of N sentence indices, drawn with replacement by
numpy's `default_rng(SEED).choice`; each system's corpus BLEU on each set is computed from
the per-sentence sufficient statistics that sacreBLEU's `BLEU` extracts
(`_extract_corpus_statistics`) and scores (`_compute_score_from_stats`), so a resample's
BLEU is exactly what `corpus_score` gives for those sentences. Both systems are scored on
the same sets: paired.

The p-value differs from sacreBLEU's: sacreBLEU asks whether two systems differ (two-sided,
with its sample differences centred), which calls two identical systems different at p =
1 / (RESAMPLES + 1). Here the question is one-sided, as Koehn's: in what share of the
resamples does the system score at least the best's BLEU? Two identical systems tie in
every resample, p = 1.0; a system the best beats in at least `CONFIDENCE` of the resamples
is significantly below it.
"""

import numpy as np

# Significantly below: the best scores higher in at least 95% of the resamples (p <= 0.05).
CONFIDENCE = 0.95
# sacreBLEU's default for --paired-bs, and its default seed (SACREBLEU_SEED): the same
# outputs always give the same p-values.
RESAMPLES = 1000
SEED = 12345


def bleu_metric(lowercase=False):
    """sacreBLEU's BLEU as `app.evaluation.metrics.score` computes it: 13a tokens, exp
    smoothing; lowercased for `lowercase`."""
    import sacrebleu

    return sacrebleu.metrics.BLEU(lowercase=lowercase)


def bleu_statistics(hypotheses, references, lowercase=False):
    """BLEU's sufficient statistics of each sentence, as sacreBLEU extracts them.

    Args:
        hypotheses, references: detokenized strings, one per sentence.
        lowercase: lowercase both first (the figure `score` calls "bleu_lowercase").

    Returns:
        int64 [N, 2 + 2 * 4]: per sentence the hypothesis length, the reference length,
        then the matching and the total n-grams of each order 1 to 4. Their column sums
        are the corpus's: `resampled_bleu` of all N once gives `corpus_score`.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to compare")
    statistics = bleu_metric(lowercase)._extract_corpus_statistics(hypotheses, [references])
    return np.asarray(statistics, dtype=np.int64)


def resample_counts(sentences, resamples=RESAMPLES, seed=SEED):
    """How often each sentence is drawn in each resample.

    The draw is sacreBLEU's: `default_rng(seed).choice(sentences, (resamples, sentences))`,
    N indices with replacement per resample; counting them turns a resample's summed
    statistics into one matrix product instead of a [resamples, N, 10] gather.

    Returns:
        int64 [resamples, sentences]: each row sums to `sentences`.
    """
    if resamples < 1:
        raise ValueError(f"at least one resample is needed, got {resamples}")
    indices = np.random.default_rng(seed).choice(sentences, size=(resamples, sentences), replace=True)
    # Row r's indices shifted by r * sentences: one bincount counts every row at once.
    offsets = np.arange(resamples, dtype=np.int64)[:, None] * sentences
    counts = np.bincount((indices + offsets).ravel(), minlength=resamples * sentences)
    return counts.reshape(resamples, sentences)


def resampled_bleu(statistics, counts):
    """The corpus BLEU of each resample.

    Args:
        statistics: int64 [N, 10], from `bleu_statistics`.
        counts: int64 [R, N], from `resample_counts` (a row of ones is the whole corpus).

    Returns:
        float64 [R]: BLEU, 0 to 100 (unrounded).
    """
    metric = bleu_metric()  # lowercasing is done in the statistics; the score is the same sum
    totals = counts @ statistics  # [R, 10]
    return np.array([metric._compute_score_from_stats(row.tolist()).score for row in totals])


def p_not_below(statistics, best_statistics, resamples=RESAMPLES, seed=SEED):
    """The share of resamples in which a system's BLEU is at least the best's: the
    p-value of "it is below the best".

    Args:
        statistics, best_statistics: int64 [N, 10] each (`bleu_statistics`), of the same
            N sentences in the same order.
        resamples, seed: the draw (`resample_counts`); the same for every system compared,
            so each is paired with the best on the same sentences.

    Returns:
        float in [0, 1], a multiple of 1 / resamples: 1.0 for a system identical to the best.
    """
    if statistics.shape != best_statistics.shape:
        raise ValueError(
            f"statistics of shape {statistics.shape} against {best_statistics.shape}: not the same sentences"
        )
    counts = resample_counts(len(statistics), resamples, seed)
    not_below = resampled_bleu(statistics, counts) >= resampled_bleu(best_statistics, counts)
    return int(not_below.sum()) / resamples


def significantly_below(p_value, confidence=CONFIDENCE):
    """Whether the best beats a system in at least `confidence` of the resamples: p <= 1 - confidence."""
    # Rounded: 1 - 0.95 is 0.05000000000000004 in floating point.
    return p_value <= round(1 - confidence, 12)
