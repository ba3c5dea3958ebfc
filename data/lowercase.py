"""Lowercasing in Python that matches the graph's `tf.strings.lower` character for character.

The preparation workers (data/prepare.py) segment text with the `sentencepiece` package
and never import TensorFlow, yet their ids must equal `SubwordTokenizer.tokenize`'s,
which lowercases with ICU (`data.tokenizer.lowercase_strings`). Python's `str.lower` uses
the same full Unicode mapping (final sigma, "İ" -> "i̇", "ß" kept), but from a newer
Unicode version than TensorFlow's ICU: the letters added since, which ICU leaves as they
are, are kept here too. tests/data/test_shards.py compares the two over every code point.
"""

import re

# The capital letters Python lowercases and TensorFlow's ICU does not (Unicode 14 and
# later): Glagolitic, Latin Extended-D and Vithkuqi capitals.
_ICU_KEEPS = re.compile(
    "([\u2c2f\ua7c0\ua7d0\ua7d6\ua7d8"
    "\U00010570-\U0001057a\U0001057c-\U0001058a\U0001058c-\U00010592\U00010594\U00010595])"
)


def lowercase(text: str) -> str:
    """`text` lowercased as `tf.strings.lower(text, encoding="utf-8")` does."""
    if not _ICU_KEEPS.search(text):
        return text.lower()
    # re.split with a group: odd items are the kept capitals.
    return "".join(part if i % 2 else part.lower() for i, part in enumerate(_ICU_KEEPS.split(text)))
