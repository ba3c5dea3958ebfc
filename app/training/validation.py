"""Validation BLEU during training: greedy decoding of raw sentences, scored by sacreBLEU."""

import numpy as np
import sacrebleu
import tensorflow as tf

from app.decoding.greedy import greedy_decode


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
    order = np.argsort([len(ids) for ids in pieces], kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def evaluate(transformer):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def translate(batch):
            return tokenizer.detokenize(greedy_decode(transformer, batch))

        # A sentence longer than the model's positions is read as the export reads it
        # (app.export.saved_model.Translator.source_ids): its first max_length - 1 pieces, then the end.
        kept = transformer.config.max_length - 1
        hypotheses = [None] * len(sources)
        for indices in batches:
            rows = [pieces[i][:kept] + [tokenizer.end_id] for i in indices]
            batch = np.zeros((len(rows), max(len(ids) for ids in rows)), np.int32)
            for row, ids in enumerate(rows):
                batch[row, : len(ids)] = ids
            for i, text in zip(indices, translate(batch).numpy()):
                hypotheses[i] = text.decode("utf-8")
        bleu = sacrebleu.metrics.BLEU(lowercase=tokenizer.lowercase)
        score = bleu.corpus_score(hypotheses, [references])
        return {
            "bleu": score.score,
            "bleu_signature": str(bleu.get_signature()),
            "eval_sentences": len(sources),
        }

    return evaluate
