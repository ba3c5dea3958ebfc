"""The numpy twin of the graph's word links (app/decoding/word_links.py against
app/decoding/alignment.py): the same links and Pharaoh lines, literal cases and random ones."""

import numpy as np
import tensorflow as tf

from app.decoding import alignment
from app.decoding.word_links import pharaoh_line, word_links
from tests.decoding.test_alignment import SOURCE_WORDS, TARGET_WORDS, WEIGHTS


def graph_lines(weights, source_words, target_words, source_counts, target_counts):
    links = alignment.word_links(
        tf.constant(weights, tf.float32), tf.constant(source_words, tf.int32), tf.constant(target_words, tf.int32),
        tf.constant(source_counts, tf.int32), tf.constant(target_counts, tf.int32),
    )
    return [line.decode() for line in alignment.pharaoh(links).numpy()], links.numpy()


def test_the_literal_case_links_as_in_the_graph():
    links = word_links(WEIGHTS[0], SOURCE_WORDS[0], TARGET_WORDS[0], 3, 3)
    np.testing.assert_array_equal(links, [[False, True, False], [True, False, True], [True, False, True]])
    graph = graph_lines(WEIGHTS, SOURCE_WORDS, TARGET_WORDS, [3], [3])[0]
    assert pharaoh_line(links) == "0-1 0-2 1-0 2-1 2-2" == graph[0]


def test_without_source_or_target_words_there_are_no_links():
    assert word_links(np.zeros([1, 1]), [-1], [-1], 0, 0).shape == (0, 0)
    assert word_links(np.zeros([0, 2]), [0, -1], [], 1, 0).shape == (0, 1)
    assert not word_links(np.full([2, 2], 0.5), [-1, -1], [0, 1], 0, 2).any()  # a blank source
    assert pharaoh_line(np.zeros([2, 3], bool)) == ""


def random_sentence(random):
    """Weights `[T, S]` with ties, and pieces' words as the tokenizer gives them: in order,
    several pieces a word, -1 at the end token and at trailing white space; some target
    words without a piece, as a target cut to the model's positions leaves them."""
    source_count, target_count = random.integers(0, 5), random.integers(0, 5)
    source_words = np.sort(random.integers(0, max(source_count, 1), random.integers(1, 8))) if source_count else []
    source_words = [*source_words, *[-1] * random.integers(1, 3)]  # trailing white space, the end token
    target_words = np.sort(random.integers(0, max(target_count, 1), random.integers(0, 8))) if target_count else []
    target_words = [*target_words, *[-1] * random.integers(0, 2)]
    weights = random.integers(0, 4, (len(target_words), len(source_words))) / 4  # ties: the first wins
    return weights, source_words, target_words, source_count, target_count


def test_random_sentences_link_as_in_the_graph_one_batch_at_a_time():
    random = np.random.default_rng(91)
    for _ in range(20):
        sentences = [random_sentence(random) for _ in range(6)]
        longest_source = max(len(s[1]) for s in sentences)
        longest_target = max(len(s[2]) for s in sentences)
        weights = np.zeros([len(sentences), longest_target, longest_source], np.float32)  # [B, T, S], 0-padded
        source_words = np.full([len(sentences), longest_source], -1)
        target_words = np.full([len(sentences), longest_target], -1)
        for b, (w, sw, tw, _, _) in enumerate(sentences):
            weights[b, : len(tw), : len(sw)] = w
            source_words[b, : len(sw)], target_words[b, : len(tw)] = sw, tw
        lines, links = graph_lines(
            weights, source_words, target_words, [s[3] for s in sentences], [s[4] for s in sentences]
        )
        for b, sentence in enumerate(sentences):
            twin = word_links(*sentence)
            np.testing.assert_array_equal(twin, links[b, : sentence[4], : sentence[3]])
            assert not links[b, sentence[4]:].any() and not links[b, :, sentence[3]:].any()
            assert pharaoh_line(twin) == lines[b]
