"""Word alignments from cross-attention (app/decoding/alignment.py): literal links, Pharaoh
lines, the weights of the head asked for, and an ensemble read through its first member."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.alignment import alignment_weights, pharaoh, select_head, word_links
from app.decoding.config import AlignmentHead
from app.decoding.ensemble import ensemble_of
from app.decoding.forced import decoder_inputs
from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer
from app.visualization.attention import collect_attention

# One sentence of 5 source pieces (the last its end token) and 4 target pieces.
SOURCE_WORDS = [[0, 1, 1, 2, -1]]
TARGET_WORDS = [[0, 1, 1, -1]]  # the last is the end token
WEIGHTS = [[
    [0.10, 0.20, 0.05, 0.05, 0.60],  # the end column is the largest of every row but the last
    [0.50, 0.10, 0.10, 0.00, 0.30],
    [0.05, 0.10, 0.10, 0.15, 0.60],
    [0.90, 0.00, 0.00, 0.00, 0.10],  # the end token's row: it links nothing
]]


def links_of(weights, source_words, target_words, source_counts, target_counts):
    return word_links(
        tf.constant(weights, tf.float32), tf.constant(source_words), tf.constant(target_words),
        tf.constant(source_counts), tf.constant(target_counts),
    ).numpy()


def test_each_target_piece_links_its_most_attended_source_word_never_the_end_token():
    # Three target words: the third was cut off (no piece), and copies the second's links.
    links = links_of(WEIGHTS, SOURCE_WORDS, TARGET_WORDS, [3], [3])
    np.testing.assert_array_equal(links, [[
        [False, True, False],  # target word 0: its piece's best of a word is column 1, word 1
        [True, False, True],  # word 1: columns 0 and 3, words 0 and 2
        [True, False, True],  # word 2, cut off: the preceding linked word's
    ]])
    assert links.shape == (1, 3, 3)  # [B, J, I]


def test_an_unlinked_word_copies_the_nearest_linked_one_the_preceding_first_else_the_following():
    weights = np.full([3, 4, 3], 0.1, np.float32)
    weights[:, :, 0] = 0.5  # every piece attends most to source piece 0
    links = links_of(
        weights,
        [[0, 1, -1], [0, 1, -1], [-1, -1, -1]],
        [[1, 1, 3, -1], [0, 0, 0, -1], [0, 1, 2, -1]],
        [2, 2, 0],  # the third source has no word (a blank input)
        [4, 2, 4],
    )
    np.testing.assert_array_equal(links[0], [[1, 0], [1, 0], [1, 0], [1, 0]])  # 0 <- 1, 2 <- 1 (not 3)
    np.testing.assert_array_equal(links[1], [[1, 0], [1, 0], [0, 0], [0, 0]])  # none past its 2 words
    np.testing.assert_array_equal(links[2], np.zeros([4, 2], bool))  # no source word, no link


def test_without_source_or_target_words_there_are_no_links():
    assert links_of(np.zeros([2, 1, 1]), [[-1], [-1]], [[-1], [-1]], [0, 0], [0, 0]).shape == (2, 0, 0)
    assert links_of(np.zeros([0, 1, 1]), np.zeros([0, 1], int), np.zeros([0, 1], int), [], []).shape == (0, 0, 0)


def test_pharaoh_lines_list_links_by_source_then_target_word():
    links = np.zeros([2, 3, 2], bool)  # [B, J, I]
    links[0, 0, 0] = links[0, 1, 1] = links[0, 2, 1] = True
    assert pharaoh(tf.constant(links)).numpy().tolist() == [b"0-0 1-1 1-2", b""]
    assert pharaoh(tf.zeros([0, 0, 0], tf.bool)).numpy().tolist() == []


def test_links_and_lines_trace_for_any_shape():
    @tf.function(input_signature=[
        tf.TensorSpec([None, None, None], tf.float32), tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
    ])
    def lines(weights, source_words, target_words, source_counts, target_counts):
        return pharaoh(word_links(weights, source_words, target_words, source_counts, target_counts))

    got = lines(tf.constant(WEIGHTS), tf.constant(SOURCE_WORDS), tf.constant(TARGET_WORDS), [3], [3])
    assert got.numpy().tolist() == [b"0-1 0-2 1-0 2-1 2-2"]


MODEL_CONFIG = ModelConfig.from_size("tiny", vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                                     max_length=16)
SOURCE_IDS = np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]], np.int32)
TARGET_IDS = np.array([[20, 21, 22, 2], [23, 2, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def transformers():
    keras.utils.set_random_seed(1234)
    return [Transformer(build_transformer(MODEL_CONFIG), MODEL_CONFIG) for _ in range(2)]


def test_the_weights_are_the_heads_cross_attention_of_the_whole_forward_pass(transformers):
    transformer = transformers[0]
    cross = collect_attention(transformer, SOURCE_IDS, decoder_inputs(TARGET_IDS)).cross  # 2 x [B, H, T, S]
    for layer in range(2):
        for head in range(2):
            got = alignment_weights(transformer, SOURCE_IDS, TARGET_IDS, AlignmentHead(layer, head))
            np.testing.assert_allclose(got, cross[layer][:, head], atol=1e-6, err_msg=f"{layer}:{head}")
        mean = alignment_weights(transformer, SOURCE_IDS, TARGET_IDS, AlignmentHead(layer - 2, None))
        np.testing.assert_allclose(mean, cross[layer].mean(axis=1), atol=1e-6)
    np.testing.assert_array_equal(select_head(tf.constant(cross[1]), None), tf.reduce_mean(cross[1], axis=1))
    with pytest.raises(ValueError, match="^alignment head 2:0: the model has 2 decoder layers"):
        alignment_weights(transformer, SOURCE_IDS, TARGET_IDS, AlignmentHead(2, 0))


def test_an_ensemble_aligns_with_its_first_member(transformers):
    first, other = transformers
    head = AlignmentHead(-1, 1)
    alone = alignment_weights(first, SOURCE_IDS, TARGET_IDS, head)
    np.testing.assert_array_equal(alignment_weights(ensemble_of([first, other]), SOURCE_IDS, TARGET_IDS, head), alone)
    assert not np.allclose(alignment_weights(other, SOURCE_IDS, TARGET_IDS, head), alone)
