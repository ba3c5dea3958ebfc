"""Words and Pharaoh links (data/words.py)."""

import unicodedata

import pytest

from data.words import WHITE_SPACE, format_pharaoh, parse_pharaoh, word_spans, words


def test_white_space_is_unicodes_white_space_property():
    # Python's own split rule is White_Space plus the separators U+001C-U+001F.
    splitting = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert set(WHITE_SPACE) == splitting - {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert all(unicodedata.category(c) in ("Zs", "Zl", "Zp", "Cc") for c in WHITE_SPACE)


def test_words_split_at_every_white_space_character_and_nowhere_else():
    assert words("Ein  Mann\xa0fährt\u3000Rad.\n") == ["Ein", "Mann", "fährt", "Rad."]
    assert words("a\x1fb") == ["a\x1fb"]
    assert words("") == [] and words(" \t ") == []
    assert word_spans(" Ein  Mann") == [(1, 4), (6, 10)]


def test_pharaoh_lines_are_parsed_checked_and_written_in_order():
    assert parse_pharaoh("0-0 1-2  2-1", 3, 3) == [(0, 0), (1, 2), (2, 1)]
    assert parse_pharaoh("", 0, 0) == []
    assert format_pharaoh([(2, 1), (0, 0), (1, 2), (0, 0)]) == "0-0 1-2 2-1"
    with pytest.raises(ValueError, match="link 3-7: the target has 5 words"):
        parse_pharaoh("0-0 3-7", 4, 5)
    with pytest.raises(ValueError, match="link 4-0: the source has 4 words"):
        parse_pharaoh("4-0", 4, 5)
    for bad in ("a-1", "1-", "1", "-1-2", "1--2", "١-2"):
        with pytest.raises(ValueError, match="not i-j"):
            parse_pharaoh(bad, 9, 9)
