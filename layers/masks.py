"""Attention masks: the one mask convention of the whole project.

Convention
----------
A mask is a **boolean** tensor that broadcasts against attention scores of shape
`[B, H, T_q, T_k]` once a head axis is inserted, i.e. it has shape `[B or 1, T_q or 1, T_k]`.
`True` means "this query position may attend to this key position"; `False` hides the key.
Attention layers apply it before the softmax by adding a large finite negative number
to hidden scores (see `MultiHeadAttention`), so hidden keys get exactly zero weight.

Padding is `PAD_ID` (layers/special_tokens.py) everywhere in the project.

Dimension names: B batch, S source length, T target length, L cache length.
"""

from keras import ops

from layers.special_tokens import PAD_ID


def padding_mask(token_ids, pad_id=PAD_ID):
    """Hides padding keys.

    Args:
        token_ids: int tensor `[B, S]`.
        pad_id: the padding id.

    Returns:
        bool `[B, 1, S]`: True where the key is a real token. The query axis has size 1
        so the same mask serves every query position.
    """
    return ops.expand_dims(ops.not_equal(token_ids, pad_id), axis=1)


def causal_mask(query_length, key_length=None, offset=0):
    """Hides future keys (the look-ahead mask).

    Query `q` sits at absolute position `offset + q` and may attend to key `k` only if
    `k <= offset + q`. With the defaults this is the lower-triangular `[1, T, T]` matrix
    of decoder self-attention; with `query_length=1, key_length=L, offset=step` it is the
    mask of one cached decoding step over a cache of `L` positions.

    Args:
        query_length: number of query positions T_q (int or scalar tensor).
        key_length: number of key positions T_k; defaults to `query_length`.
        offset: absolute position of the first query (int or scalar tensor).

    Returns:
        bool `[1, T_q, T_k]`.
    """
    if key_length is None:
        key_length = query_length
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    allowed = ops.expand_dims(key_positions, 0) <= ops.expand_dims(query_positions, 1)
    return ops.expand_dims(allowed, 0)


def decoder_self_attention_mask(target_ids, pad_id=PAD_ID):
    """Look-ahead mask combined with the target padding mask.

    Positions come from a cumulative sum over the ids rather than `arange(T)`, because in
    a functional model T is unknown (None) when the graph is built.

    Args:
        target_ids: int tensor `[B, T]`.

    Returns:
        bool `[B, T, T]`: query t may attend to key u iff u <= t and u is not padding.
    """
    positions = ops.cumsum(ops.ones_like(target_ids, dtype="int32"), axis=1) - 1  # [B, T]
    look_ahead = ops.expand_dims(positions, 1) <= ops.expand_dims(positions, 2)  # [B, T, T]
    return ops.logical_and(look_ahead, padding_mask(target_ids, pad_id))
