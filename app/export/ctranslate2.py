"""Export a trained model's weights as a CTranslate2 model directory.

    python export.py --model-dir runs/tiny-multi30k-en-de --format ctranslate2
    # -> saved_models/translator/ctranslate2/<next version>/
    #    model.bin, config.json, shared_vocabulary.json, subwords.model, export_info.json

    spec = transformer_spec(translator.transformer, pieces, translator.alignment_head)   # a ctranslate2 TransformerSpec
    path = export_ctranslate2(translator, "saved_models/translator/ctranslate2", metadata=...)

The weights are the `Translator`'s, as `app.export.saved_model.load_translator` chooses
and averages them, copied weight for weight into CTranslate2's `TransformerSpec`: pre- or
post-norm as the model's `norm_first`, attention biases or none, shared embeddings, the
project's own positional table (its sinusoids interleave sine and cosine, where
CTranslate2's built-in table concatenates them; a learned table as it is), embeddings
scaled by sqrt(d_model), the model's layer-norm epsilon. The vocabulary is the
sentencepiece model's pieces in id order, shared by source and target; CTranslate2's
start, end and unknown tokens are the pieces of START_ID, END_ID and UNKNOWN_ID
(layers/special_tokens.py). Settings CTranslate2 cannot express (ScaleNorm, per-head widths
other than d_model / h) are refused with an ExportError naming the setting, and so is an
ensemble (export_info.json's `ensemble`): CTranslate2 decodes one model.

Word alignments: CTranslate2 returns the attention of one decoder layer's cross-attention
(`return_attention`), the mean of its first N heads (the spec's `alignment_layer` and
`alignment_heads`; N = 0: all of them). The export makes that the head the SavedModel's
`align` reads (`Translator.alignment_head`, export.py's --alignment-head): a layer's mean
is N = 0; head h is N = 1 once that layer's cross-attention heads are reordered so that h
comes first (`head_first`), which changes no output. export_info.json records the head
(`alignment_head`), and the version server answers `align` with it.

`app/serving/ctranslate2_version.py` serves such a directory behind the same REST API as
the SavedModel. TF Serving ignores the non-numeric `ctranslate2/` directory beside its
versions. CTranslate2 is optional: `pip install -r requirements-ctranslate2.txt`.
"""

import json
import math
import os

import numpy as np

from app.decoding.config import chosen_alignment_head
from app.decoding.ensemble import Ensemble
from app.export.export_info import ENSEMBLE, EXPORT_INFO
from app.export.saved_model import ExportError, new_version
from data.tokenizer import MODEL_FILENAME
from layers.special_tokens import END_ID, START_ID, UNKNOWN_ID

# The directory beside the SavedModel versions that holds the CTranslate2 versions.
SUBDIRECTORY = "ctranslate2"
INSTALL_HINT = "pip install -r requirements-ctranslate2.txt"


def import_ctranslate2():
    """The `ctranslate2` module, or an ExportError that says how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise ExportError(f"CTranslate2 is not installed: {INSTALL_HINT}") from None
    return ctranslate2


def sinusoid_table(max_length, width):
    """float32 `[max_length, width]`: what `layers.SinusoidalPositionalEncoding` adds at
    each position, sine in the even dimensions and cosine in the odd ones."""
    positions = np.arange(max_length, dtype=np.float32)[:, None]  # [P, 1]
    inverse_frequencies = np.exp(np.arange(0, width, 2, dtype=np.float32) * np.float32(-math.log(10000.0) / width))
    angles = positions * inverse_frequencies[None, :]  # [P, D/2]
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(max_length, width).astype(np.float32)


def check_expressible(config):
    """ExportError naming the first setting of a `ModelConfig` CTranslate2 cannot express."""
    if config.normalization != "layer":
        raise ExportError(
            f"normalization: {config.normalization!r} (ScaleNorm) has no CTranslate2 equivalent; "
            "only 'layer' exports to CTranslate2"
        )
    if config.key_dim * config.num_heads != config.d_model or config.value_dim != config.key_dim:
        raise ExportError(
            f"key_dim={config.key_dim}, value_dim={config.value_dim} with num_heads={config.num_heads}: "
            f"CTranslate2's Transformer needs key_dim = value_dim = d_model / num_heads = "
            f"{config.d_model / config.num_heads:g}"
        )


def check_single_model(metadata):
    """ExportError where `metadata` (export_info.json's fields) records an ensemble
    (`ENSEMBLE`): CTranslate2 decodes one model, and cannot average several models'
    distributions as the ensemble's SavedModel does."""
    members = (metadata or {}).get(ENSEMBLE)
    if members:
        raise ExportError(
            f"--ensemble: CTranslate2 decodes one model, not an ensemble ({', '.join(map(str, members))}); "
            "export the ensemble as a SavedModel (--format savedmodel), or one model for CTranslate2"
        )


def check_model_dir(model_dir):
    """Before the slow part of an export: ExportError unless CTranslate2 is installed and
    can express the model `model_dir` trains (its settings.json)."""
    from app.model_dir.settings import load_settings

    import_ctranslate2()
    check_expressible(load_settings(model_dir)[0])


def _numpy(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, dtype=np.float32)


def _linear(spec, *denses, outputs=None, inputs=None):
    """Sets a LinearSpec from Keras Dense layers (kernel `[in, out]`), concatenated along
    their outputs: CTranslate2's weight is `[out, in]`. `outputs` and `inputs` (index
    arrays; None: as they are) reorder each layer's output units and input units."""
    outputs = slice(None) if outputs is None else outputs
    inputs = slice(None) if inputs is None else inputs
    spec.weight = np.concatenate([_numpy(d.kernel)[inputs][:, outputs].T for d in denses], axis=0)
    if denses[0].use_bias:
        spec.bias = np.concatenate([_numpy(d.bias)[outputs] for d in denses], axis=0)


def head_first(head, num_heads, width):
    """The units of a layer's `num_heads` heads of `width` each (`split_heads`' layout:
    head k holds units k * width to (k + 1) * width - 1), head `head` first, the others
    after it in order: int `[num_heads * width]`. Reordering the query, key and value
    projections' output units and the output projection's input units by the same heads
    changes no output: the heads attend independently and the output projection sums
    over them."""
    order = [head] + [k for k in range(num_heads) if k != head]
    return np.concatenate([np.arange(k * width, (k + 1) * width) for k in order])


def alignment_settings(head):
    """CTranslate2's `(alignment_layer, alignment_heads)` for a resolved `AlignmentHead`:
    its layer, and 0 (the mean of all heads) for a layer's mean, else 1 (the first head,
    which `head_first` makes the one chosen)."""
    return head.layer, 0 if head.head is None else 1


def _norm(spec, layer):
    spec.gamma = _numpy(layer.gamma)
    spec.beta = _numpy(layer.beta)


def _feed_forward(spec, norm, feed_forward):
    if feed_forward.activation not in ("relu", None):
        raise ExportError(f"feed-forward activation {feed_forward.activation!r}: only relu exports to CTranslate2")
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, feed_forward.inner_dense)
    _linear(spec.linear_1, feed_forward.output_dense)


def _positions(spec, layer, config):
    if config.positional == "learned":
        spec.encodings = _numpy(layer.position_embeddings)  # [P, D]
    else:
        spec.encodings = sinusoid_table(config.max_length, config.d_model)


def transformer_spec(transformer, pieces, alignment_head=None):
    """A CTranslate2 `TransformerSpec` holding the weights of `transformer`.

    Args:
        transformer: an `app.model.transformer.Transformer` (`Translator.transformer`).
        pieces: the vocabulary's pieces in id order (`len == vocab_size`).
        alignment_head: the `AlignmentHead` CTranslate2's attention returns
            (`Translator.alignment_head`); None: `chosen_alignment_head`'s default.

    Raises:
        ExportError naming a setting CTranslate2 cannot express; ValueError naming a head
        the model does not have.
    """
    ctranslate2 = import_ctranslate2()
    config = transformer.config
    check_expressible(config)
    if len(pieces) != config.vocab_size:
        raise ExportError(f"the vocabulary has {len(pieces)} pieces, the model {config.vocab_size}")
    alignment_head = chosen_alignment_head(config, alignment_head)
    alignment_layer, alignment_heads = alignment_settings(alignment_head)
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (config.num_layers, config.num_layers), config.num_heads, pre_norm=config.norm_first,
        alignment_layer=alignment_layer, alignment_heads=alignment_heads,
    )
    for embedding in (transformer.source_embedding, transformer.target_embedding):
        if not embedding.scale:
            raise ExportError("unscaled token embeddings: CTranslate2 multiplies them by sqrt(d_model)")

    encoder, decoder = spec.encoder, spec.decoder
    encoder.scale_embeddings = decoder.scale_embeddings = True
    encoder.embeddings[0].weight = _numpy(transformer.source_embedding.embeddings)  # [V, D]
    decoder.embeddings.weight = _numpy(transformer.target_embedding.embeddings)  # [V, D]
    if transformer.output_projection is None:  # the target embedding, reversed
        decoder.projection.weight = decoder.embeddings.weight
    else:
        decoder.projection.weight = _numpy(transformer.output_projection.kernel).T  # [V, D]
    _positions(encoder.position_encodings, transformer.source_positions, config)
    _positions(decoder.position_encodings, transformer.target_positions, config)
    if config.norm_first:
        _norm(encoder.layer_norm, transformer.encoder_norm)
        _norm(decoder.layer_norm, transformer.decoder_norm)

    for layer_spec, layer in zip(encoder.layer, transformer.encoder_layers):
        attention = layer.self_attention
        _norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
        _linear(layer_spec.self_attention.linear[0], attention.query_dense, attention.key_dense, attention.value_dense)
        _linear(layer_spec.self_attention.linear[1], attention.output_dense)
        _feed_forward(layer_spec.ffn, layer.feed_forward_norm, layer.feed_forward)
    for index, (layer_spec, layer) in enumerate(zip(decoder.layer, transformer.decoder_layers)):
        attention, cross = layer.self_attention, layer.cross_attention
        _norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
        _linear(layer_spec.self_attention.linear[0], attention.query_dense, attention.key_dense, attention.value_dense)
        _linear(layer_spec.self_attention.linear[1], attention.output_dense)
        # The alignment layer's chosen head first, where CTranslate2 reads it (module docstring).
        heads = None
        if index == alignment_head.layer and alignment_head.head is not None:
            heads = head_first(alignment_head.head, config.num_heads, config.key_dim)  # [H * K]
        _norm(layer_spec.attention.layer_norm, layer.cross_attention_norm)
        _linear(layer_spec.attention.linear[0], cross.query_dense, outputs=heads)
        _linear(layer_spec.attention.linear[1], cross.key_dense, cross.value_dense, outputs=heads)
        _linear(layer_spec.attention.linear[2], cross.output_dense, inputs=heads)
        _feed_forward(layer_spec.ffn, layer.feed_forward_norm, layer.feed_forward)

    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    spec.config.bos_token = spec.config.decoder_start_token = pieces[START_ID]
    spec.config.eos_token = pieces[END_ID]
    spec.config.unk_token = pieces[UNKNOWN_ID]
    # The source's end token is added by whoever tokenizes (as the SavedModel does), not here.
    spec.config.add_source_bos = spec.config.add_source_eos = False
    spec.register_source_vocabulary(list(pieces))
    spec.register_target_vocabulary(list(pieces))
    return spec


def vocabulary_pieces(model_proto):
    """The pieces of a sentencepiece model (its bytes), in id order."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def save_spec(spec, directory, quantization=None):
    """Validates and writes `spec` into the existing, empty `directory`."""
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(directory)


def ctranslate2_metadata(translator, metadata=None, quantization=None):
    """export_info.json of a CTranslate2 version: the SavedModel's `metadata`
    (`export_metadata`), the engine, and what serving needs of the model that
    CTranslate2's files do not say: its positions, the largest alpha the SavedModel
    accepts (`checked_alpha`), and the head its attention returns (`alignment_head`,
    resolved: "0:mean"), which the version server's `align` reads."""
    from app.decoding.beam_search import largest_alpha

    max_length = translator.transformer.config.max_length
    # What serving_default decodes with, where `metadata` does not say.
    decoding = getattr(translator, "decoding", None) or translator._decoding
    # How the SavedModel's graph shares a call among beam searches; CTranslate2 has its own threads.
    metadata = {key: value for key, value in (metadata or {}).items() if key != "parallel_searches"}
    return {
        "beam_size": decoding.beam_size,
        "alpha": decoding.alpha,
        "max_extra_length": decoding.max_extra_length,
        **metadata,
        "engine": "ctranslate2",
        "quantization": quantization or "float32",
        "max_length": max_length,
        "max_alpha": largest_alpha(max_length),
        "alignment_head": str(translator.alignment_head),
    }


def export_ctranslate2(translator, base, version=None, metadata=None, quantization=None):
    """Writes `translator`'s weights as a CTranslate2 model to `base/<version>/` atomically.

    The directory holds CTranslate2's files (model.bin, config.json,
    shared_vocabulary.json), the run's subwords.model, which serving tokenizes with, and
    export_info.json: `metadata` plus "engine": "ctranslate2" and the alignment head.

    Args:
        translator: an `app.export.saved_model.Translator` of one model (an ensemble's is
            refused: CTranslate2 decodes one).
        base: the directory of versions, usually `saved_models/<name>/ctranslate2`.
        version: a positive int; default the next free one.
        quantization: CTranslate2's weight type on disk (None: float32, "int8", ...).

    Raises:
        ExportError: `metadata` records an ensemble (`check_single_model`), or
            `translator` decodes one, before anything is written.

    Returns:
        the version's path.
    """
    check_single_model(metadata)
    # Called without export.py's metadata too: the translator itself tells.
    if isinstance(translator.transformer, Ensemble):
        raise ExportError("a CTranslate2 model holds one model, not an ensemble: export an ensemble as a SavedModel")
    with new_version(base, version) as (temporary, final):
        model_proto = translator.tokenizer.model_proto
        spec = transformer_spec(translator.transformer, vocabulary_pieces(model_proto), translator.alignment_head)
        os.makedirs(temporary)
        save_spec(spec, temporary, quantization)
        with open(os.path.join(temporary, MODEL_FILENAME), "wb") as f:
            f.write(model_proto)
        with open(os.path.join(temporary, EXPORT_INFO), "w") as f:
            json.dump(ctranslate2_metadata(translator, metadata, quantization), f, indent=2)
    return final
