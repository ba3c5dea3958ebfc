"""`Transformer.cross_attention`: one decoder layer's cross-attention from a forced pass that
stops there, exactly what the whole decoder returns for that layer."""

import keras
import numpy as np
import pytest

from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer

NUM_LAYERS = 3
SOURCE_IDS = np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]], "int32")
TARGET_IDS = np.array([[1, 11, 12, 13, 14], [1, 15, 16, 0, 0]], "int32")


@pytest.fixture(scope="module", params=["post_norm", "pre_norm"])
def transformer(request):
    keras.utils.set_random_seed(1234)
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=NUM_LAYERS, d_model=16, d_ff=32, num_heads=2, max_length=32,
        norm_first=request.param == "pre_norm",
    )
    return Transformer(build_transformer(config), config)


def test_each_layers_cross_attention_is_exactly_the_whole_decoders(transformer):
    memory, memory_mask = transformer.encode(SOURCE_IDS, training=False)
    _, _, cross = transformer.decode(TARGET_IDS, memory, memory_mask, training=False, return_attention_scores=True)
    for layer in range(NUM_LAYERS):
        weights = transformer.cross_attention(TARGET_IDS, memory, memory_mask, layer, training=False)
        assert tuple(weights.shape) == (2, 2, 5, 5)  # [B, H, T, S]
        np.testing.assert_array_equal(np.asarray(weights), np.asarray(cross[layer]), err_msg=f"layer {layer}")


@pytest.mark.parametrize("layer", [-1, NUM_LAYERS])
def test_a_layer_the_model_lacks_is_named(transformer, layer):
    memory, memory_mask = transformer.encode(SOURCE_IDS, training=False)
    with pytest.raises(ValueError, match=f"^decoder layer {layer}: the model has layers 0 to {NUM_LAYERS - 1}$"):
        transformer.cross_attention(TARGET_IDS, memory, memory_mask, layer)
