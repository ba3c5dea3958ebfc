"""A list worked through in batches of similar length, the results back in input order: the
one way every command and training's validation decode or score many sentences, so that a
batch pads little.

    translations = in_length_order(translate, sentences, batch_size=64)
"""


def in_length_order(function, items, batch_size, progress=None, length=len):
    """`function` over `items` in batches of `batch_size` items of similar `length`, shortest
    first; its results in the order of `items`.

    Args:
        function: `function(list of items) -> list of results`, one result per item of the
            batch, in its order (a batch of sentences translated, say).
        items: a list.
        batch_size: items per call of `function`.
        progress: called with the count of items done after each batch (e.g.
            `CountProgress.update`), or None.
        length: `length(item)`, the key batches are sorted by; items of equal length keep
            their order.
    """
    order = sorted(range(len(items)), key=lambda i: length(items[i]))
    results = [None] * len(items)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        for i, result in zip(indices, function([items[i] for i in indices])):
            results[i] = result
        if progress is not None:
            progress(start + len(indices))
    return results
