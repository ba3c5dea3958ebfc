"""Evaluation during training: the validation loss and perplexity, BLEU of greedy decoding
scored by sacreBLEU (`make_bleu_evaluator`), and early stopping by patience (`Validator`)."""

import math

import numpy as np
import sacrebleu
import tensorflow as tf

from app.decoding.model_search import greedy_ids
from app.decoding.truncation import truncated_source
from app.evaluation.in_order import in_length_order


def make_bleu_evaluator(tokenizer, sources, references, max_sentences=None, batch_size=64):
    """Returns `evaluate(transformer) -> {"bleu", "bleu_signature", "eval_sentences"}`.

    Sentences are decoded in batches of similar length (less padding), then put back in
    order and scored with sacreBLEU's default (cased, 13a-tokenized, detokenized input),
    or lowercased BLEU for a tokenizer that lowercases (its output is all lowercase).

    Args:
        tokenizer: the run's `SubwordTokenizer`.
        sources, references: lists of raw strings.
        max_sentences: score only the first N sentences (None: all).
    """
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    if max_sentences:
        sources, references = sources[:max_sentences], references[:max_sentences]
    pieces = tokenizer.tokenize(tf.constant(sources)).to_list()  # without the end token

    def evaluate(transformer):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def translate(batch):
            return tokenizer.detokenize(greedy_ids(transformer, batch)[0])

        def translate_batch(sentences):
            # A sentence longer than the model's positions is read as the export reads it.
            rows = [truncated_source(ids, transformer.config.max_length, tokenizer.end_id) for ids in sentences]
            batch = np.zeros((len(rows), max(len(ids) for ids in rows)), np.int32)
            for row, ids in enumerate(rows):
                batch[row, : len(ids)] = ids
            return [text.decode("utf-8") for text in translate(batch).numpy()]

        hypotheses = in_length_order(translate_batch, pieces, batch_size)
        bleu = sacrebleu.metrics.BLEU(lowercase=tokenizer.lowercase)
        score = bleu.corpus_score(hypotheses, [references])
        return {
            "bleu": score.score,
            "bleu_signature": str(bleu.get_signature()),
            "eval_sentences": len(sources),
        }

    return evaluate


class Validator:
    """Evaluates the model on the validation set, records each evaluation, offers it to
    the best-checkpoint tracker, and says when patience has run out.

    Args:
        eval_step: `eval_step(batch) -> (smoothed_loss_sum, nll_sum, target_tokens)`
            (`app.training.step.make_eval_step`).
        batches: `() -> iterable` of the validation set's (distributed) batches.
        transformer: the `Transformer` that `evaluate_fn` decodes with.
        evaluate_fn: `evaluate_fn(transformer) -> dict` with at least "bleu"; None skips BLEU.
        record: `record(entry)`, where the evaluations go (`MetricsLog.record`).
        tracker: the run's `checkpoints.CheckpointTracker`, which keeps the best checkpoint.
        eval_every: steps between evaluations.
        patience: evaluations without a better BLEU before `should_stop` (None: never).
    """

    def __init__(self, eval_step, batches, transformer, evaluate_fn, record, tracker, eval_every, patience):
        self._eval_step, self._batches, self._transformer = eval_step, batches, transformer
        self._evaluate_fn, self._record, self._tracker = evaluate_fn, record, tracker
        self._eval_every, self._patience = eval_every, patience

    def evaluate(self, step, say):
        """Evaluates the weights of `step`, records the evaluation, `say`s it in one line and
        offers it to the tracker as a best checkpoint; returns it, a dict."""
        entry = self._measure(step)
        self._record(entry)
        say(format_evaluation(entry))
        self._tracker.offer_best(entry, step)
        return entry

    def should_stop(self, step):
        """Whether `patience` evaluations, the one of `step` the last, have passed since the best.

        Counted from the best evaluation's step rather than kept in memory: a resumed run
        counts the evaluations it redoes once, and an evaluation of the best's own step,
        redone, as no loss.
        """
        since_best = step // self._eval_every - (self._tracker.best_step or 0) // self._eval_every
        return bool(self._patience) and since_best >= self._patience

    def _measure(self, step):
        loss_sum, nll_sum, tokens = 0.0, 0.0, 0.0
        for batch in self._batches():
            batch_loss, batch_nll, batch_tokens = self._eval_step(batch)
            loss_sum += float(batch_loss)
            nll_sum += float(batch_nll)
            tokens += float(batch_tokens)
        tokens = max(tokens, 1.0)
        entry = {
            "step": step,
            "valid_loss": loss_sum / tokens,
            # Per subword token, so it depends on the vocabulary: compare at one vocab size.
            "valid_perplexity": math.exp(min(nll_sum / tokens, 50.0)),
        }
        if self._evaluate_fn is not None:
            entry.update(self._evaluate_fn(self._transformer))
        return entry


def format_evaluation(entry):
    """One log line for an evaluation."""
    parts = [f"step {entry['step']}: validation loss {entry['valid_loss']:.4f}"]
    if "valid_perplexity" in entry:
        parts.append(f"perplexity {entry['valid_perplexity']:.2f}")
    if "bleu" in entry:
        parts.append(f"BLEU {entry['bleu']:.2f} ({entry.get('bleu_signature', '')})")
    return ", ".join(parts)
