"""Every sentence of a list translated, in batches of similar length, back in input order."""


def translate_all(translate, sentences, batch_size, progress=None):
    """Translations of `sentences` in their order, decoded in batches of similar length.

    Args:
        translate: `translate(list[str]) -> list[str]`, one batch.
        sentences: the sources.
        batch_size: sentences per call of `translate`.
        progress: called with the count of sentences translated after each batch (e.g.
            `CountProgress.update`), or None.
    """
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    hypotheses = [None] * len(sentences)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        for i, text in zip(indices, translate([sentences[i] for i in indices])):
            hypotheses[i] = text
        if progress is not None:
            progress(start + len(indices))
    return hypotheses
