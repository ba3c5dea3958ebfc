"""Custom Keras layers, one per file, named after its class in snake_case
(`multi_head_attention.py` holds `MultiHeadAttention`), each registered serializable.

Four files hold functions or constants, not layers: `special_tokens` (the reserved token
ids, imported by every floor above; it imports nothing), `masks`, `residual` (the pre-norm
or post-norm block) and `normalization` (the normalization layer a configuration names).
"""
