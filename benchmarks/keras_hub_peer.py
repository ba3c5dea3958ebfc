"""The keras-hub peer of the project's model, and what both comparisons with it share.

    peer = build_keras_hub_transformer(ModelConfig.from_size("tiny", vocab_size=8000))
    arrays = fixed_length_arrays(pairs.source, pairs.target)       # the example's padding
    flops = training_flops(config, source_lengths, target_lengths)  # non-padding tokens only

The peer is the model of keras-hub's English-Spanish example
(https://keras.io/examples/nlp/neural_machine_translation_with_keras_hub/), written
again here at the project's sizes: `TokenAndPositionEmbedding` (learned positions, 40 of
them, no `mask_zero`, as in the example's code), `num_layers` `TransformerEncoder`s and
`TransformerDecoder`s (the example has one of each), `Dropout(0.5)` and a softmax
`Dense` over the vocabulary. Separate source and target embeddings and an untied output
layer, as in the example; the project shares all three matrices.

Used by bench_vs_keras_hub_training.py and bench_vs_keras_hub_decoding.py, and pinned by
tests/benchmarks/test_bench_vs_keras_hub.py.

Dimension names: N layers, D d_model, F d_ff, H heads, V vocabulary, s / t the
non-padding source / decoder positions of one sentence.
"""

import numpy as np

from app.model.flops import forward_flops, training_flops  # noqa: F401  (this module's API, as before)
from benchmarks import machine
from layers.special_tokens import END_ID, PAD_ID

# The example's fixed padded length, and its batch size in sentences.
MAX_SEQUENCE_LENGTH = 40
BATCH_SIZE = 64


# ---------------------------------------------------------------------------------------
# The peer model.


def build_keras_hub_transformer(config, sequence_length=MAX_SEQUENCE_LENGTH):
    """The example's encoder-decoder at the size of `config` (a `ModelConfig`).

    Inputs `[encoder_inputs [B, S], decoder_inputs [B, T]]` with S, T <= sequence_length;
    output: probabilities `[B, T, V]` (the example's softmax `Dense`).
    """
    import keras
    import keras_hub

    if config.key_dim * config.num_heads != config.d_model or config.value_dim != config.key_dim:
        raise ValueError(
            f"keras-hub layers use key_dim = d_model / num_heads; got key_dim={config.key_dim}, "
            f"value_dim={config.value_dim}, d_model={config.d_model}, num_heads={config.num_heads}"
        )

    def embedding():
        return keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=config.vocab_size, sequence_length=sequence_length, embedding_dim=config.d_model
        )

    # Encoder.
    encoder_inputs = keras.Input(shape=(None,), name="encoder_inputs")
    x = embedding()(encoder_inputs)
    for _ in range(config.num_layers):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim=config.d_ff, num_heads=config.num_heads, normalize_first=config.norm_first
        )(inputs=x)
    encoder_outputs = x

    # Decoder, a model of its own as in the example.
    decoder_inputs = keras.Input(shape=(None,), name="decoder_inputs")
    encoded_seq_inputs = keras.Input(shape=(None, config.d_model), name="decoder_state_inputs")
    x = embedding()(decoder_inputs)
    for _ in range(config.num_layers):
        x = keras_hub.layers.TransformerDecoder(
            intermediate_dim=config.d_ff, num_heads=config.num_heads, normalize_first=config.norm_first
        )(
            decoder_sequence=x, encoder_sequence=encoded_seq_inputs
        )
    x = keras.layers.Dropout(0.5)(x)
    decoder_outputs = keras.layers.Dense(config.vocab_size, activation="softmax")(x)
    decoder = keras.Model([decoder_inputs, encoded_seq_inputs], decoder_outputs)

    decoder_outputs = decoder([decoder_inputs, encoder_outputs])
    return keras.Model([encoder_inputs, decoder_inputs], decoder_outputs, name="transformer")


# ---------------------------------------------------------------------------------------
# The example's input pipeline: every sentence padded to 40.


def pack(rows, length, end_id=None):
    """int32 `[len(rows), length]`: each row padded with 0, or cut to `length`.

    A cut row keeps `end_id` as its last id when one is given (keras-hub's
    `StartEndPacker` with an end value always ends a row with it).
    """
    packed = np.zeros([len(rows), length], np.int32)
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) > length:
            row = row[: length - 1] + [end_id] if end_id is not None else row[:length]
        packed[i, : len(row)] = row
    return packed


def fixed_length_arrays(source_rows, target_rows, sequence_length=MAX_SEQUENCE_LENGTH):
    """The example's `preprocess_batch`, on the project's ids.

    Args:
        source_rows: per sentence, the project's source ids (tokens + [end]).
        target_rows: per sentence, the project's target ids ([start] + tokens + [end]).

    Returns:
        dict of int32 `[N, sequence_length]`: "encoder_inputs" (source padded to 40),
        "decoder_inputs" (target packed to 41, all but the last) and "labels" (all but
        the first).
    """
    target = pack(target_rows, sequence_length + 1, end_id=END_ID)  # [N, 41]
    return {
        "encoder_inputs": pack(source_rows, sequence_length),
        "decoder_inputs": target[:, :-1],
        "labels": target[:, 1:],
    }


def useful_fraction(labels):
    """The share of label positions that are real tokens (not padding)."""
    labels = np.asarray(labels)
    return float((labels != PAD_ID).sum()) / labels.size


def lengths(source, labels):
    """Non-padding `(source lengths [B], label lengths [B])` of id arrays `[B, S]`, `[B, T]`."""
    return (np.asarray(source) != PAD_ID).sum(axis=1), (np.asarray(labels) != PAD_ID).sum(axis=1)


# ---------------------------------------------------------------------------------------
# This machine.


def machine_header():
    """Lines naming the command, the CPU and the library versions."""
    import keras
    import keras_hub
    import tensorflow as tf

    return machine.machine_header(
        [f"TensorFlow {tf.__version__}", f"Keras {keras.__version__}", f"keras-hub {keras_hub.__version__}"]
    )
