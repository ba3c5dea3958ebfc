"""Validation BLEU during training: greedy decoding of raw sentences, scored by sacreBLEU."""

import numpy as np
import sacrebleu
import tensorflow as tf

from app.greedy import greedy_decode


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
    source_ids = tokenizer.tokenize(tf.constant(sources)).to_list()
    source_ids = [ids + [tokenizer.end_id] for ids in source_ids]
    order = np.argsort([len(ids) for ids in source_ids], kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def evaluate(transformer):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def translate(batch):
            return tokenizer.detokenize(greedy_decode(transformer, batch))

        hypotheses = [None] * len(sources)
        for indices in batches:
            length = max(len(source_ids[i]) for i in indices)
            batch = np.zeros((len(indices), length), np.int32)
            for row, i in enumerate(indices):
                batch[row, : len(source_ids[i])] = source_ids[i]
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
