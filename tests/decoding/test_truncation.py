"""app/decoding/truncation.py: a source longer than the model reads, cut the same way in
Python and in the graph."""

import tensorflow as tf

from app.decoding.truncation import subwords_kept, truncated_source, truncated_sources

END = 2


def test_a_source_keeps_its_first_max_length_minus_one_subwords_then_the_end_token():
    assert subwords_kept(4) == 3
    assert truncated_source([5, 6, 7, 8, 9], 4, END) == [5, 6, 7, END]
    assert truncated_source([5, 6, 7], 4, END) == [5, 6, 7, END]  # fits: only the end token is added
    assert truncated_source([], 4, END) == [END]
    assert truncated_source(("a", "b", "c"), 3, "</s>") == ["a", "b", "</s>"]  # pieces alike


def test_the_graph_cuts_a_batch_as_python_cuts_each_source():
    rows = [[5, 6, 7, 8, 9], [5, 6, 7], [], [5]]
    ids = truncated_sources(tf.ragged.constant(rows, tf.int32), 4, END)
    expected = [truncated_source(row, 4, END) for row in rows]
    assert ids.dtype == tf.int32
    assert ids.numpy().tolist() == [row + [0] * (4 - len(row)) for row in expected]
