"""Word links from one sentence's attention, in numpy: the rule of app/decoding/alignment.py's
graph `word_links`, for the CTranslate2 version server (app/serving/ctranslate2_version.py),
which imports no TensorFlow. tests/decoding/test_word_links.py holds the two equal.

    links = word_links(weights, source_words, target_words, source_count, target_count)  # bool [J, I]
    pharaoh_line(links)                                                                # "0-0 1-2"

Each target piece links to its most attended source piece that belongs to a word (never
the source's end token), lifted to the two pieces' words (data/words.py's `piece_words`);
a target word none of whose pieces was read copies the links of the nearest linked target
word, the preceding one first.

Dimension names: S source pieces, T target pieces, I source words, J target words.
"""

import numpy as np

from data.words import format_pharaoh


def word_links(weights, source_words, target_words, source_count, target_count):
    """One sentence's word alignment from its piece attention.

    Args:
        weights: float `[T, S]`: row t, what the position predicting target piece t
            attends to.
        source_words: int `[S]`, each source piece's word, -1 for none (the end token).
        target_words: int `[T]`, each target piece's word, -1 for none.
        source_count, target_count: the words of the source and of the target; the words
            of the pieces are below them.

    Returns:
        bool `[J, I]` (J = target_count, I = source_count): target word j is linked to
        source word i. Every target word has a link where the source has a word.
    """
    weights = np.asarray(weights, np.float32)  # [T, S], as the graph reads it
    source_words = np.asarray(source_words, np.int64)  # [S]
    target_words = np.asarray(target_words, np.int64)  # [T]
    links = np.zeros((target_count, source_count), bool)  # [J, I]
    if len(target_words):
        # Each target piece's most attended source piece of a word: the first on ties, as tf.argmax.
        masked = np.where(source_words[None, :] >= 0, weights, -np.inf)  # [T, S]
        source_word = source_words[np.argmax(masked, axis=1)]  # [T]; -1 where the source has no word
        real = (target_words >= 0) & (source_word >= 0)  # [T]
        links[target_words[real], source_word[real]] = True

    # A target word without links copies the nearest linked one's, the preceding first.
    linked = np.flatnonzero(links.any(axis=1))  # the linked target words, in order
    copied = links.copy()
    for j in np.flatnonzero(~links.any(axis=1)):
        preceding, following = linked[linked < j], linked[linked > j]
        if len(preceding) or len(following):
            copied[j] = links[preceding[-1] if len(preceding) else following[0]]
    return copied


def pharaoh_line(links):
    """bool `[J, I]` -> one Pharaoh line: `i-j` pairs by i, then j; "" for no link."""
    target, source = np.nonzero(links)
    return format_pharaoh(zip(source.tolist(), target.tolist()))
