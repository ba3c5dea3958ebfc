"""The Transformer assembled from the custom layers into a functional Keras model.

    model = build_transformer(ModelConfig.from_size("tiny", vocab_size=8000))
    logits = model([source_ids, target_ids])            # [B, T, V]

    transformer = Transformer(model, config)             # the same layers, step by step
    memory, memory_mask = transformer.encode(source_ids)
    states = transformer.decoder_states(target_ids, memory, memory_mask)   # [B, T, D]
    weights = transformer.cross_attention(target_ids, memory, memory_mask, layer=0)   # [B, H, T, S]
    logits = ops.matmul(states, ops.transpose(transformer.output_matrix()))  # as above
    memory_cache = transformer.init_memory_cache(memory, memory_mask)    # once per sentence
    self_cache = transformer.empty_self_cache(batch_size * beams)
    logits, self_cache = transformer.decode_step(token_ids, step, self_cache, memory_cache)  # [N, V]
    # decode_step is the reference; searches step app/decoding/incremental.py's decoder.

Dimension names: B batch, S source length, T target length, L positions decoded so far,
N = B x K hypotheses (K beams per sentence, sentence-major), H heads, D d_model, V vocabulary
size.
"""

import keras
from keras import ops

from app.model.config import ModelConfig
from layers.decoder_layer import DecoderLayer
from layers.dropout import Dropout
from layers.encoder_layer import EncoderLayer
from layers.learned_positional_encoding import LearnedPositionalEncoding
from layers.masks import decoder_self_attention_mask, padding_mask
from layers.normalization import normalization_layer
from layers.sinusoidal_positional_encoding import SinusoidalPositionalEncoding
from layers.token_embedding import TokenEmbedding


def build_transformer(config: ModelConfig, name="transformer"):
    """Builds the paper's encoder-decoder as a functional `keras.Model`.

    Inputs: `[source_ids [B, S], target_ids [B, T]]`, int32, 0 = padding. `target_ids` is
    the decoder input (start token first). Output: logits `[B, T, V]`, float32 also under
    mixed precision so the loss is computed in full precision.
    """
    source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
    target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
    transformer = Transformer.from_layers(_make_layers(config), config)
    memory, memory_mask = transformer.encode(source_ids)
    logits = transformer.decode(target_ids, memory, memory_mask)
    return keras.Model([source_ids, target_ids], logits, name=name)


def _make_layers(config):
    """Creates every layer of the model, named so that `Transformer` can find them again."""
    source_embedding = TokenEmbedding(config.vocab_size, config.d_model, name="shared_embedding")
    if config.share_embeddings == "all":
        target_embedding = source_embedding
    else:
        source_embedding = TokenEmbedding(config.vocab_size, config.d_model, name="source_embedding")
        target_embedding = TokenEmbedding(config.vocab_size, config.d_model, name="target_embedding")
    if config.share_embeddings == "none":
        output_projection = keras.layers.Dense(config.vocab_size, use_bias=False, name="output_projection")
    else:
        output_projection = None  # the target embedding, called with reverse=True

    positional_class = (
        LearnedPositionalEncoding if config.positional == "learned" else SinusoidalPositionalEncoding
    )
    layer_args = dict(
        num_heads=config.num_heads,
        key_dim=config.key_dim,
        value_dim=config.value_dim,
        inner_dim=config.d_ff,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        inner_dropout=config.inner_dropout,
        norm_first=config.norm_first,
        layer_norm_epsilon=config.layer_norm_epsilon,
        attention_bias=config.attention_bias,
        normalization=config.normalization,
    )

    def final_norm(name):
        # Pre-norm stacks end un-normalized; post-norm layers already end with a norm.
        if not config.norm_first:
            return None
        return normalization_layer(config.normalization, config.layer_norm_epsilon, name=name)

    return dict(
        source_embedding=source_embedding,
        target_embedding=target_embedding,
        output_projection=output_projection,
        # Learned position tables are separate per stack; sinusoids have no weights.
        source_positions=positional_class(config.max_length, name="source_positions"),
        target_positions=positional_class(config.max_length, name="target_positions"),
        source_dropout=Dropout(config.dropout, name="source_dropout"),
        target_dropout=Dropout(config.dropout, name="target_dropout"),
        encoder_layers=[EncoderLayer(**layer_args, name=f"encoder_layer_{i}") for i in range(config.num_layers)],
        decoder_layers=[DecoderLayer(**layer_args, name=f"decoder_layer_{i}") for i in range(config.num_layers)],
        encoder_norm=final_norm("encoder_norm"),
        decoder_norm=final_norm("decoder_norm"),
    )


class Transformer:
    """The model's computations, on the layers of a model built by `build_transformer`.

    `build_transformer` wires its functional graph with `encode` and `decode`. Decoding
    (app/decoding/model_search.py) calls `encode` and `output_kernel`, then steps
    app/decoding/incremental.py's `IncrementalDecoder`, which reads these layers' weights
    and computes `decode_step`'s function in fewer ops. `decode_step`, with
    `init_memory_cache` and `empty_self_cache`, is its reference: tests hold the two equal
    (tests/decoding/test_incremental.py) and hold `decode_step` equal to `decode`. All of
    them run eagerly or inside a `tf.function` on the very same layers (a loaded model
    works too), so the paths cannot drift apart.
    """

    def __init__(self, model: keras.Model, config: ModelConfig = None):
        """Finds the layers of `model`, checking them against `config`.

        With no `config` the layer count is read off the model: enough to encode and to
        compute decoder states (training), not to decode, which needs the vocabulary size
        and the longest length from the configuration.
        """

        def find(name):
            try:
                return model.get_layer(name)
            except ValueError:
                return None

        if config is None:
            num_layers = sum(layer.name.startswith("decoder_layer_") for layer in model.layers)
        else:
            num_layers = config.num_layers
        shared = find("shared_embedding")
        layers = dict(
            source_embedding=shared or find("source_embedding"),
            target_embedding=shared or find("target_embedding"),
            output_projection=find("output_projection"),
            source_positions=find("source_positions"),
            target_positions=find("target_positions"),
            source_dropout=find("source_dropout"),
            target_dropout=find("target_dropout"),
            encoder_layers=[find(f"encoder_layer_{i}") for i in range(num_layers)],
            decoder_layers=[find(f"decoder_layer_{i}") for i in range(num_layers)],
            encoder_norm=find("encoder_norm"),
            decoder_norm=find("decoder_norm"),
        )
        missing = [k for k, v in layers.items() if v is None and k not in _OPTIONAL_LAYERS]
        missing += [k for k in ("encoder_layers", "decoder_layers") if None in layers[k]]
        if missing:
            raise ValueError(
                f"model {model.name!r} does not match the configuration: no layers for {missing}"
            )
        self._init(layers, config)

    @classmethod
    def from_layers(cls, layers, config):
        self = cls.__new__(cls)
        self._init(layers, config)
        return self

    def _init(self, layers, config):
        self.config = config
        for key, layer in layers.items():
            setattr(self, key, layer)

    # Encoder.

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Runs the encoder once.

        Args:
            source_ids: int32 `[B, S]`, 0 = padding.

        Returns:
            `(memory [B, S, D], memory_mask bool [B, 1, S])`, followed by the per-layer
            self-attention weights `[B, H, S, S]` (a list) if asked for.
        """
        memory_mask = padding_mask(source_ids)  # [B, 1, S]
        x = self.source_positions(self.source_embedding(source_ids))  # [B, S, D]
        x = self.source_dropout(x, training=training)
        all_weights = []
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=memory_mask, return_attention_scores=return_attention_scores, training=training)
            if return_attention_scores:
                x, weights = x
                all_weights.append(weights)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, memory_mask, all_weights) if return_attention_scores else (x, memory_mask)

    # Decoder, all target positions at once (training, scoring).

    def decode(self, target_ids, memory, memory_mask, training=None, return_attention_scores=False):
        """Runs the decoder over a whole target prefix.

        Args:
            target_ids: int32 `[B, T]`, the decoder input (start token first), 0 = padding.
            memory, memory_mask: from `encode`.

        Returns:
            logits float32 `[B, T, V]`, followed by lists of per-layer self-attention
            weights `[B, H, T, T]` and cross-attention weights `[B, H, T, S]` if asked for.
        """
        outputs = self.decoder_states(target_ids, memory, memory_mask, training, return_attention_scores)
        if return_attention_scores:
            states, self_weights, cross_weights = outputs
            return self._project(states), self_weights, cross_weights
        return self._project(outputs)

    def decoder_states(self, target_ids, memory, memory_mask, training=None, return_attention_scores=False):
        """`decode` up to the pre-softmax projection: the decoder's final states.

        Training projects these itself (`app.training.output_loss`), a slice of rows at a time,
        so that the `[B, T, V]` logits never exist whole.

        Returns:
            states `[B, T, D]` in the compute dtype (normalized, for pre-norm stacks),
            followed by the attention weights as in `decode` if asked for.
        """
        x, self_attention_mask = self._decoder_input(target_ids, training)  # [B, T, D], [B, T, T]
        self_weights, cross_weights = [], []
        for layer in self.decoder_layers:
            x = layer(
                x,
                memory,
                self_attention_mask=self_attention_mask,
                memory_mask=memory_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if return_attention_scores:
                x, self_w, cross_w = x
                self_weights.append(self_w)
                cross_weights.append(cross_w)
        states = self._final_norm(x)
        return (states, self_weights, cross_weights) if return_attention_scores else states

    def cross_attention(self, target_ids, memory, memory_mask, layer, training=None):
        """One decoder layer's cross-attention weights from a teacher-forced pass, exactly
        those `decode(..., return_attention_scores=True)` returns for that layer.

        The pass stops after `layer`: later layers, the final norm and the pre-softmax
        projection cannot change these weights, and word alignments
        (app/decoding/alignment.py) need nothing else.

        Args:
            target_ids: int32 `[B, T]`, the decoder input (start token first), 0 = padding.
            memory, memory_mask: from `encode`.
            layer: the decoder layer, from 0 (a Python int).

        Returns:
            `[B, H, T, S]` in the compute dtype: row t is what position t, reading
            `target_ids[:, t]`, attends to in the source.
        """
        if not 0 <= layer < len(self.decoder_layers):
            raise ValueError(f"decoder layer {layer!r}: the model has layers 0 to {len(self.decoder_layers) - 1}")
        x, self_attention_mask = self._decoder_input(target_ids, training)  # [B, T, D], [B, T, T]
        for decoder_layer in self.decoder_layers[: layer + 1]:
            # Asked for the weights at every layer, as `decode` asks, so that the same
            # computation runs and the weights are the same to the last bit.
            x, _, cross_weights = decoder_layer(
                x,
                memory,
                self_attention_mask=self_attention_mask,
                memory_mask=memory_mask,
                return_attention_scores=True,
                training=training,
            )
        return cross_weights

    def _decoder_input(self, target_ids, training):
        """The decoder's first layer's input `[B, T, D]` and its self-attention mask `[B, T, T]`."""
        self_attention_mask = decoder_self_attention_mask(target_ids)  # [B, T, T]
        x = self.target_positions(self.target_embedding(target_ids))  # [B, T, D]
        return self.target_dropout(x, training=training), self_attention_mask

    # Decoder, one position at a time (inference).

    def init_memory_cache(self, memory, memory_mask):
        """What decoding reads of the source, computed once per sentence: every layer's
        projection of the memory into cross-attention keys and values, and the mask.

        Returns:
            `{"memory_mask": bool [B, 1, S], "layers": [{"key": [B, H, S, K],
            "value": [B, H, S, V]}, ...]}`; it stays at one entry per sentence however
            many beams decode it.
        """
        return {
            "memory_mask": memory_mask,
            "layers": [layer.init_memory_cache(memory) for layer in self.decoder_layers],
        }

    def empty_self_cache(self, hypotheses):
        """Every layer's self-attention cache before the first step, one per hypothesis:
        `[{"key": [N, H, 0, K], "value": [N, H, 0, V]}, ...]`. Each `decode_step` appends
        a position, so under `tf.while_loop` axis 2 needs a loose shape invariant."""
        return [layer.self_attention.empty_cache(hypotheses) for layer in self.decoder_layers]

    def output_kernel(self):
        """The pre-softmax projection laid out for `states @ kernel`: `[D, V]` in the
        compute dtype, a copy made once, for `decode_step` and the incremental decoder.

        A decoding loop computes it before its first step: the shared embedding's `[V, D]`
        multiplied transposed (`MatMul` with `transpose_b`) ran several times slower on
        CPU for the few rows of a decoding step than a `[D, V]` operand
        (docs/lab-notebook/2026-11-27-decoding-against-ctranslate2.md).
        """
        if self.output_projection is not None:
            return ops.cast(self.output_projection.kernel, self.output_projection.compute_dtype)
        return ops.transpose(ops.cast(self.target_embedding.embeddings, self.target_embedding.compute_dtype))

    def decode_step(self, token_ids, step, self_cache, memory_cache, output_kernel=None):
        """Decodes one position with the caches.

        Args:
            token_ids: int32 `[N]`, the tokens at position `step`; N = B x K, the K
                hypotheses of each sentence next to each other.
            step: int32 scalar, the position being decoded (0 for the start token); the
                self-attention cache holds positions 0 .. step - 1.
            self_cache: from `empty_self_cache(N)` or the previous step.
            memory_cache: `init_memory_cache(...)` of the B sentences.
            output_kernel: `output_kernel()`, computed once outside the decoding loop;
                without it the projection is computed from the weights as in `decode`.

        Returns:
            `(logits float32 [N, V] for position step + 1, self_cache of step + 1 positions)`.
        """
        x = self.target_embedding(ops.expand_dims(token_ids, 1))  # [N, 1, D]
        x = self.target_positions(x, start_index=step)
        # Every cached position is an earlier real token (decoding stops at the end
        # token), so the newest position may attend to all of them: no mask.
        new_self_cache = []
        for layer, layer_self_cache, layer_memory_cache in zip(
            self.decoder_layers, self_cache, memory_cache["layers"]
        ):
            x, layer_self_cache = layer(
                x,
                memory_mask=memory_cache["memory_mask"],
                self_cache=layer_self_cache,
                memory_cache=layer_memory_cache,
            )
            new_self_cache.append(layer_self_cache)
        states = self._final_norm(x)  # [N, 1, D]
        if output_kernel is None:
            logits = self._project(states)[:, 0, :]  # [N, V]
        else:
            logits = ops.cast(ops.matmul(states[:, 0, :], output_kernel), "float32")  # [N, V]
        return logits, new_self_cache

    # The pre-softmax projection.

    def output_matrix(self):
        """The pre-softmax projection as a `[V, D]` matrix in the compute dtype:
        `logits = states @ output_matrix()^T`, the same product `decode` computes."""
        if self.output_projection is not None:
            kernel = self.output_projection.kernel  # [D, V]
            return ops.transpose(ops.cast(kernel, self.output_projection.compute_dtype))
        return ops.cast(self.target_embedding.embeddings, self.target_embedding.compute_dtype)

    def _final_norm(self, x):
        # Pre-norm stacks end un-normalized; post-norm layers already end with a norm.
        return x if self.decoder_norm is None else self.decoder_norm(x)

    def _project(self, states):
        if self.output_projection is not None:
            logits = self.output_projection(states)
        else:
            logits = self.target_embedding(states, reverse=True)
        return ops.cast(logits, "float32")  # [B, T, V]


_OPTIONAL_LAYERS = ("output_projection", "encoder_norm", "decoder_norm")
