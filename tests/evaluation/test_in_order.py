"""app/evaluation/in_order.py: sentences translated in length-sorted batches, back in order."""

from app.evaluation.in_order import in_length_order


def test_translations_come_back_in_input_order_whatever_the_batching():
    sentences = ["a b c d", "a", "a b", "a b c d e f", "a b c"]
    batches = []

    def translate(batch):
        batches.append(batch)
        return [s.upper() for s in batch]

    assert in_length_order(translate, sentences, batch_size=2) == [s.upper() for s in sentences]
    # Batched by length, so padding stays small.
    assert batches[0] == ["a", "a b"]


def test_any_items_by_any_length_with_the_progress_after_each_batch():
    pairs = [("a b c", "x"), ("a", "x y z w"), ("a b", ""), ("a", "")]  # lengths 6, 8, 3, 1 (characters)
    batches, done = [], []

    def score(batch):
        batches.append(batch)
        return [len(source) + len(target) for source, target in batch]

    results = in_length_order(score, pairs, 3, done.append, length=lambda pair: len(pair[0]) + len(pair[1]))
    assert results == [6, 8, 3, 1]
    assert batches == [[("a", ""), ("a b", ""), ("a b c", "x")], [("a", "x y z w")]]
    assert done == [3, 4]
    assert in_length_order(score, [], 3) == []
