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
