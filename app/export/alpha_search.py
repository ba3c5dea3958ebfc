"""The length penalty alpha chosen on the validation split: the smallest whose BLEU is not
significantly below the best alpha's, each alpha's decoding speed measured beside it.

    trained = load_trained(model_dir)
    record = choose_on_validation(trained.translator(decoding), model_dir)   # logs the grid, the tests and the choice
    translator = trained.translator(dataclasses.replace(decoding, alpha=record["chosen"]))  # what export.py exports

The paper took beam 4 and alpha 0.6 "after experimentation on the development set"; a
model of another size, corpus or training length may prefer another alpha, and the
SavedModel's `serving_default` cannot be told one per request (`translate_with_options` can).
export.py runs this unless `--alpha` is given, and records what `choose_on_validation`
returns in `export_info.json`.

Each alpha of `ALPHA_GRID` decodes the same validation sentences (an evenly spaced sample
of at most `MAX_SENTENCES`) through the translator's `translate_with_options` function,
traced once for all of them, and is scored as `python -m app.evaluate` scores; the decode
is timed (sentences per second at `BATCH_SIZE`).

Why not simply the highest BLEU: on the default model that was the top of the grid, whose
small gain on validation did not hold on held-out test sets and which decoded far slower, as
a stronger penalty keeps beams alive longer (issue #74; the figures: docs/results.md and
docs/lab-notebook/2026-11-28-records-moved-from-code-comments.md). So every alpha is
compared with the best by paired bootstrap resampling (app/evaluation/significance.py), and
the smallest alpha that the best does not beat in at least `significance.CONFIDENCE` of the
resamples is chosen: the mildest departure from plain log-probability that the validation
set cannot tell from the best.
"""

import dataclasses
import time

import numpy as np
import tensorflow as tf

from app.runtime.progress import format_seconds
from app.decoding.config import DecodingConfig
from app.evaluation import significance
from app.evaluation.in_order import in_length_order
from app.evaluation.metrics import score
from app.model_dir.settings import load_settings
from data.corpora import open_corpus
from data.errors import DataError

# From no length penalty (hypotheses ranked by plain log-probability) to well past the
# paper's 0.6: a model whose outputs run short gains from a stronger penalty. Steps of 0.2,
# because BLEU moves little between neighbouring alphas and each value costs a full decode.
ALPHA_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6)
# Validation sentences decoded per alpha at most, an evenly spaced sample of a larger split:
# Multi30k's 1,014 nearly whole, WMT's 3,000-sentence newstest at a third of the cost.
MAX_SENTENCES = 1000
# Sentences per decoding call, as `python -m app.evaluate`'s default --batch-size.
BATCH_SIZE = 64
# Where no validation split can be read: the paper's value.
FALLBACK_ALPHA = DecodingConfig.alpha
SPLIT = "validation"
# How the alpha is chosen, as export_info.json records it.
RULE = "the smallest alpha whose BLEU is not significantly below the best alpha's (paired bootstrap)"


@dataclasses.dataclass(frozen=True)
class AlphaScore:
    """One alpha's result on the validation sample."""

    alpha: float
    # sacreBLEU's BLEU, rounded to 2 decimals as app.evaluate prints it.
    bleu: float
    # Of "below the best": the share of bootstrap resamples in which this alpha's BLEU is at
    # least the best's (`significance.p_not_below`); 1.0 for the best itself.
    p_value: float
    # Sentences decoded per second, at BATCH_SIZE, rounded to 0.1.
    sentences_per_second: float


@dataclasses.dataclass(frozen=True)
class AlphaSearch:
    """Each alpha's BLEU, p-value against the best and speed on one set of validation
    sentences, the best alpha by BLEU and the alpha chosen."""

    # Validation sentences decoded for each alpha.
    sentences: int
    # AlphaScore per alpha, in the grid's order.
    grid: tuple
    # The alpha of the highest BLEU; of equal ones, the smallest alpha.
    best: float
    # The smallest alpha not significantly below the best (`choose`).
    chosen: float
    # sacreBLEU's signature of the BLEU compared (cased, or lowercased for a lowercasing model).
    signature: str
    # The confidence at which "significantly below" is decided.
    confidence: float = significance.CONFIDENCE

    def record(self):
        """What export_info.json's "alpha_search" holds."""
        return {
            "split": SPLIT,
            "sentences": self.sentences,
            "batch_size": BATCH_SIZE,
            "grid": [dataclasses.asdict(entry) for entry in self.grid],
            "best": self.best,
            "chosen": self.chosen,
            "rule": RULE,
            "confidence": self.confidence,
            "resamples": significance.RESAMPLES,
            "seed": significance.SEED,
            "bleu_signature": self.signature,
        }

    def summary(self):
        """Lines: each alpha's BLEU, p-value against the best and speed, then the choice."""
        lines = [
            f"alpha by validation BLEU ({self.sentences:,} sentences), each against the best by paired bootstrap "
            f"({significance.RESAMPLES:,} resamples):"
        ]
        for entry in self.grid:
            if entry.alpha == self.best:
                against = "the best"
            else:
                below = significance.significantly_below(entry.p_value, self.confidence)
                against = f"p {entry.p_value:.3f}" + (" (significantly below)" if below else "")
            speed = f"{entry.sentences_per_second:.1f} sentences/s"
            lines.append(f"  alpha {entry.alpha:g}: BLEU {entry.bleu:.2f}, {against}, {speed}")
        lines.append(
            f"-> {self.chosen:g}: the smallest alpha not significantly below {self.best:g}'s BLEU "
            f"at {self.confidence:.0%} confidence"
        )
        return "\n".join(lines)


def best_alpha(scores):
    """The alpha of the highest BLEU of `scores` (`(alpha, BLEU)` pairs); of equal ones the
    smallest, the mildest departure from plain log-probability."""
    alpha, _ = max(scores, key=lambda pair: (pair[1], -pair[0]))
    return alpha


def choose(p_values, confidence=significance.CONFIDENCE):
    """The smallest alpha of `p_values` (`{alpha: p-value against the best}`, the best's 1.0)
    that is not significantly below the best at `confidence`."""
    return min(alpha for alpha, p in p_values.items() if not significance.significantly_below(p, confidence))


def sample_indices(count, limit=None):
    """Which of `count` sentences are decoded: all of them, or `limit` evenly spaced ones.

    Returns:
        list of int, ascending and distinct: `i * count // limit` for i < limit (the first
        sentence, then one every count / limit), or range(count) where count <= limit.
    """
    limit = MAX_SENTENCES if limit is None else limit
    if limit < 1:
        raise ValueError(f"the sample must hold at least one sentence, got a limit of {limit}")
    if count <= limit:
        return list(range(count))
    return (np.arange(limit, dtype=np.int64) * count // limit).tolist()


def validation_pairs(data_config):
    """`(sources, references)`: the raw validation split of a run's dataset (its `DataConfig`,
    from settings.json), read as `python -m app.evaluate --split validation` reads it: the
    dataset's own validation files or split, or the pairs held out of train.

    Raises:
        DataError: the dataset has no validation split, or it cannot be read.
    """
    corpus = open_corpus(data_config.dataset, data_config.source_lang, data_config.target_lang)
    if SPLIT not in corpus.splits:
        raise DataError(f"{data_config.dataset} has no {SPLIT} split")
    pairs = list(corpus.pairs(SPLIT))
    return [source for source, _ in pairs], [reference for _, reference in pairs]


def search_alpha(
    translator,
    sources,
    references,
    target_lang,
    *,
    lowercase,
    grid=None,
    max_sentences=None,
    log=None,
    clock=time.monotonic,
):
    """Decodes the validation sentences at each alpha of `grid`, timing and scoring each, and
    compares each alpha's BLEU with the best's by paired bootstrap resampling.

    Args:
        translator: an `app.export.saved_model.Translator` (or anything with its
            `serve_with_options(inputs string [B], alpha float32 [B], max_extra_length int32 [B])
            -> {"translations": string [B], ...}` and `decoding`): one traced function serves
            every alpha, because alpha is a tensor input.
        sources, references: the validation split's raw strings, one pair per sentence.
        target_lang: the references' language, for `app.commands.evaluate.score`.
        lowercase: whether the model writes lowercase (trained with --lowercase): then
            lowercased BLEU is compared, as training's validation BLEU does.
        grid: the alphas to try (default `ALPHA_GRID`).
        max_sentences: decode an evenly spaced sample of at most this many (default
            `MAX_SENTENCES`).
        log: called with a line per alpha as its BLEU and speed are measured (each costs
            a full decode), or None.
        clock: seconds, for the speeds; tests may replace it.

    Returns:
        AlphaSearch: the chosen alpha is the smallest not significantly below the best
        (`choose`).
    """
    grid = tuple(float(alpha) for alpha in (ALPHA_GRID if grid is None else grid))
    if not grid:
        raise ValueError("the grid of alphas is empty")
    if len(set(grid)) != len(grid):
        raise ValueError(f"the grid of alphas repeats a value: {grid}")
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    if not sources:
        raise DataError("the validation split has no sentences to choose alpha on")
    indices = sample_indices(len(sources), max_sentences)
    sources, references = [sources[i] for i in indices], [references[i] for i in indices]
    max_extra_length = translator.decoding.max_extra_length
    metric = "bleu_lowercase" if lowercase else "bleu"

    def translate_at(alpha):
        def translate(sentences):
            n = len(sentences)
            out = translator.serve_with_options(
                tf.constant(sentences, tf.string), tf.fill([n], alpha), tf.fill([n], max_extra_length)
            )
            return [text.decode("utf-8") for text in out["translations"].numpy()]

        return translate

    # The first call traces the function and builds its graph: spent before any alpha is timed.
    translate_at(grid[0])(sources[:1])
    scores, speeds, statistics, signature = [], [], [], None
    for number, alpha in enumerate(grid, start=1):
        started = clock()
        hypotheses = in_length_order(translate_at(alpha), sources, BATCH_SIZE)
        seconds = clock() - started
        result = score(hypotheses, references, target_lang)
        scores.append((alpha, result[metric]))
        speeds.append(round(len(sources) / max(seconds, 1e-6), 1))
        statistics.append(significance.bleu_statistics(hypotheses, references, lowercase))
        signature = result[metric + "_signature"]
        if log is not None:
            log(
                f"  alpha {alpha:g} ({number}/{len(grid)}): BLEU {result[metric]:.2f}, "
                f"{speeds[-1]:.1f} sentences/s (decoded in {format_seconds(seconds)})"
            )
    best = best_alpha(scores)
    best_statistics = statistics[grid.index(best)]
    p_values = {
        alpha: 1.0 if alpha == best else significance.p_not_below(stats, best_statistics)
        for alpha, stats in zip(grid, statistics)
    }
    entries = tuple(AlphaScore(alpha, bleu, p_values[alpha], speed) for (alpha, bleu), speed in zip(scores, speeds))
    return AlphaSearch(sentences=len(sources), grid=entries, best=best, chosen=choose(p_values), signature=signature)


def choose_on_validation(translator, model_dir, log=print, grid=None, max_sentences=None):
    """export.py's choice of alpha: `search_alpha` on the run's validation split.

    Logs a line before (decoding takes a while), one per alpha as it is measured, and after
    them the summary: each alpha's BLEU, p-value against the best and speed, and the
    choice; where the validation split cannot be read, one line that says why, and the
    paper's 0.6.

    Returns:
        the dict export_info.json records as "alpha_search" (`AlphaSearch.record`), or,
        without validation, `{"split": None, "sentences": 0, "grid": [], "chosen": 0.6,
        "skipped": why}`.
    """
    _, data_config, _ = load_settings(model_dir)
    try:
        sources, references = validation_pairs(data_config)
    except DataError as error:
        log(f"no validation split to choose alpha on ({error}): using the paper's {FALLBACK_ALPHA}")
        return {"split": None, "sentences": 0, "grid": [], "chosen": FALLBACK_ALPHA, "skipped": str(error)}
    grid = ALPHA_GRID if grid is None else grid
    sentences = len(sample_indices(len(sources), max_sentences))
    beam_size = translator.decoding.beam_size
    log(f"choosing alpha on {SPLIT}: {len(grid)} values x {sentences:,} sentences, beam {beam_size}")
    search = search_alpha(
        translator, sources, references, data_config.target_lang, lowercase=data_config.lowercase, grid=grid,
        max_sentences=max_sentences, log=log,
    )
    log(search.summary())
    return search.record()
