"""The length penalty alpha chosen by BLEU on the validation split, as the paper chose its 0.6.

    translator, _ = load_translator(model_dir)
    record = choose_on_validation(translator, model_dir)   # logs the grid's BLEU and the choice
    translator.set_default_alpha(record["chosen"])

The paper took beam 4 and alpha 0.6 "after experimentation on the development set"; a
model of another size, corpus or training length may prefer another alpha, and the
SavedModel's `serving_default` cannot be told one per request (`translate_with_options` can).
export.py runs this unless `--alpha` is given, and records what `choose_on_validation`
returns in `export_info.json`.

Each alpha of `ALPHA_GRID` decodes the same validation sentences (an evenly spaced sample
of at most `MAX_SENTENCES`) through the translator's `translate_with_options` function,
traced once for all of them, and is scored as `python -m app.evaluate` scores.
"""

import dataclasses
import time

import numpy as np
import tensorflow as tf

from app.cli.progress import format_seconds
from app.decoding.translate import DecodingConfig
from app.evaluation.in_order import translate_all
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


@dataclasses.dataclass(frozen=True)
class AlphaSearch:
    """The BLEU of each alpha on one set of validation sentences, and the alpha chosen."""

    # Validation sentences decoded for each alpha.
    sentences: int
    # ((alpha, BLEU), ...) in the grid's order; BLEU rounded to 2 decimals, as app.evaluate prints it.
    grid: tuple
    # The alpha of the highest BLEU; of equal ones, the smallest alpha.
    chosen: float
    # sacreBLEU's signature of the BLEU compared (cased, or lowercased for a lowercasing model).
    signature: str

    def record(self):
        """What export_info.json's "alpha_search" holds."""
        return {
            "split": SPLIT,
            "sentences": self.sentences,
            "grid": [{"alpha": alpha, "bleu": bleu} for alpha, bleu in self.grid],
            "chosen": self.chosen,
            "bleu_signature": self.signature,
        }

    def summary(self):
        """One line: each alpha's BLEU and the choice."""
        scores = " | ".join(f"{alpha:g}: {bleu:.2f}" for alpha, bleu in self.grid)
        return f"alpha by validation BLEU ({self.sentences:,} sentences): {scores} -> {self.chosen:g}"


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
    translator, sources, references, target_lang, lowercase, grid=None, max_sentences=None, log=None,
    clock=time.monotonic,
):
    """Decodes the validation sentences at each alpha of `grid` and scores each.

    Args:
        translator: an `app.export.saved_model.Translator` (or anything with its
            `serve_with_options(inputs string [B], alpha float32 [B], max_extra_length int32 [B])
            -> {"translations": string [B], ...}` and `decoding`): one traced function serves
            every alpha, because alpha is a tensor input.
        sources, references: the validation split's raw strings, one pair per sentence.
        target_lang: the references' language, for `app.evaluate.score`.
        lowercase: whether the model writes lowercase (trained with --lowercase): then
            lowercased BLEU is compared, as training's validation BLEU does.
        grid: the alphas to try (default `ALPHA_GRID`).
        max_sentences: decode an evenly spaced sample of at most this many (default
            `MAX_SENTENCES`).
        log: called with a line per alpha as its BLEU is measured (each costs a full
            decode), or None.
        clock: seconds, for those lines; tests may replace it.

    Returns:
        AlphaSearch.
    """
    grid = tuple(float(alpha) for alpha in (ALPHA_GRID if grid is None else grid))
    if not grid:
        raise ValueError("the grid of alphas is empty")
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

    scores, signature = [], None
    for number, alpha in enumerate(grid, start=1):
        started = clock()
        hypotheses = translate_all(translate_at(alpha), sources, BATCH_SIZE)
        result = score(hypotheses, references, target_lang)
        scores.append((alpha, result[metric]))
        signature = result[metric + "_signature"]
        if log is not None:
            seconds = format_seconds(clock() - started)
            log(f"  alpha {alpha:g} ({number}/{len(grid)}): BLEU {result[metric]:.2f}, decoded in {seconds}")
    # The highest BLEU; of equal ones the smallest alpha, the mildest departure from plain log-probability.
    chosen, _ = max(scores, key=lambda pair: (pair[1], -pair[0]))
    return AlphaSearch(sentences=len(sources), grid=tuple(scores), chosen=chosen, signature=signature)


def choose_on_validation(translator, model_dir, log=print, grid=None, max_sentences=None):
    """export.py's choice of alpha: `search_alpha` on the run's validation split.

    Logs a line before (decoding takes a while), one per alpha as it is measured, and the
    grid's scores with the choice after;
    where the validation split cannot be read, one line that says why, and the paper's 0.6.

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
        translator, sources, references, data_config.target_lang, data_config.lowercase, grid, max_sentences, log
    )
    log(search.summary())
    return search.record()
