"""The one rule for a source longer than the model reads: its first `max_length - 1`
subwords, then the end token, so that a source never holds more than the model's
`max_length` positions. The export's signatures (app/export/saved_model.py), training's
validation BLEU (app/training/validation.py) and a CTranslate2 version
(app/serving/ctranslate2_version.py) all read a source so, the first in the graph
(`truncated_sources`), the others in Python (`truncated_source`).

    truncated_source([5, 6, 7, 8], max_length=4, end=2)   # [5, 6, 7, 2]

No TensorFlow at import: the CTranslate2 version runs without it.
"""


def subwords_kept(max_length):
    """The most subwords of a source a model of `max_length` positions reads: the end
    token takes the last position."""
    return max_length - 1


def truncated_source(tokens, max_length, end):
    """One source as the model reads it: the list of its first `subwords_kept(max_length)`
    `tokens` (ids or pieces, without the end token), then `end`."""
    return list(tokens[: subwords_kept(max_length)]) + [end]


def truncated_sources(tokens, max_length, end_id):
    """A batch of sources as the model reads them: int32 `[B, S]`, S <= `max_length`, each
    row `truncated_source` of its row of `tokens` (ragged `[B, None]` subword ids, without
    the end token), padded with 0."""
    import tensorflow as tf

    kept = tokens[:, : subwords_kept(max_length)]
    end = tf.fill([kept.nrows(), 1], end_id)
    return tf.concat([kept, tf.RaggedTensor.from_tensor(end)], axis=1).to_tensor()
