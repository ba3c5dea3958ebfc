"""Tests for the vocabulary's training sample: the lines it holds in memory are fewer, and
the sentences, in their order, are those of the whole sample thinned to the cap."""

import pytest

from data import prepare as preparation
from data import tokenizer as tokenization
from data.errors import DataError


class _Corpus:
    """A corpus stream of train only, counting the passes over it."""

    def __init__(self, pairs):
        self._pairs = pairs
        self.passes = 0

    def pairs(self, split):
        assert split == "train"
        self.passes += 1
        yield from self._pairs

    def count(self, split):
        """A pass of its own, as `CorpusStream.count` makes the first time."""
        return sum(1 for _ in self.pairs(split))


def _reference(pairs, cap):
    """The sample as it was made before it streamed: both sides held, then thinned."""
    sources = [source for source, _ in pairs]
    targets = [target for _, target in pairs]
    lines = sources + targets
    step = max(1, -(-len(lines) // cap))
    return lines[::step]


@pytest.mark.parametrize("count, cap", [(23, 10), (24, 6), (7, 1000), (1, 1)])
def test_the_sample_is_every_step_th_line_of_source_then_target(count, cap, monkeypatch):
    monkeypatch.setattr(preparation, "MAX_VOCAB_TRAINING_SENTENCES", cap)
    pairs = [(f"source {i} ä", f"Ziel {i} ß") for i in range(count)]
    sample = list(preparation.vocabulary_sample(_Corpus(pairs)))
    assert sample == _reference(pairs, cap)
    assert len(sample) <= max(cap, 2)


def test_the_counting_pass_runs_first_so_bad_input_raises_before_training():
    class Broken(_Corpus):
        def pairs(self, split):
            yield ("a", "b")
            raise DataError("train.de line 2: bad")

    with pytest.raises(DataError, match="line 2"):
        preparation.vocabulary_sample(Broken([]))


def test_the_sampled_lines_stream_through_a_second_pass():
    corpus = _Corpus([("a", "b"), ("c", "d")])
    sample = preparation.vocabulary_sample(corpus)
    assert corpus.passes == 1  # The count, and nothing read for the sample yet.
    assert next(sample) == "a"
    assert list(sample) == ["c", "b", "d"]
    assert corpus.passes == 2


def test_lowercasing_the_sample_a_chunk_at_a_time_is_lowercasing_it_whole(monkeypatch):
    lines = ["A Man", "ΟΔΟΣ Σ", "İstanbul", "Straße GROẞE", "", "Ein Mann fährt"]
    monkeypatch.setattr(tokenization, "_LOWERCASE_CHUNK", 4)
    assert list(tokenization._lowercased(iter(lines))) == tokenization.lowercase_lines(lines)
    assert list(tokenization._lowercased([])) == []
