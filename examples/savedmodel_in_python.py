"""Translate with an exported SavedModel in Python: each signature, no server.

    python examples/savedmodel_in_python.py saved_models/translator/1 "A dog runs." "Two men talk."

Prints one block per signature. Run it from anywhere: it needs TensorFlow and
tensorflow-text, not this project's code.
"""

import sys

import tensorflow as tf

# The export tokenizes in its graph with tensorflow-text's SentencePiece op; importing the
# package registers that op. Without it, loading fails with
# "Op type not registered 'SentencepieceOp'".
import tensorflow_text  # noqa: F401


def texts(tensor):
    """UTF-8 strings of a string tensor of any shape, as nested lists."""
    return tf.nest.map_structure(lambda value: value.decode("utf-8"), tensor.numpy().tolist())


def main(path, sentences):
    model = tf.saved_model.load(path)
    inputs = tf.constant(sentences)  # string [B]
    print("signatures:", ", ".join(sorted(model.signatures)))

    # The paper's beam search: the best translation and its length-normalized log-probability.
    best = model.signatures["serving_default"](inputs=inputs)
    print("\nserving_default")
    for translation, score in zip(texts(best["translations"]), best["scores"].numpy()):
        print(f"  {score:8.4f}  {translation}")

    # Every beam's hypothesis, best first: translations string [B, K], scores float32 [B, K].
    nbest = model.signatures["nbest"](inputs=inputs)
    print("\nnbest")
    for sentence, hypotheses, scores in zip(sentences, texts(nbest["translations"]), nbest["scores"].numpy()):
        print(f"  {sentence}")
        for rank, (translation, score) in enumerate(zip(hypotheses, scores), 1):
            print(f"    {rank}. {score:8.4f}  {translation}")

    # Greedy decoding: one beam.
    greedy = model.signatures["greedy"](inputs=inputs)
    print("\ngreedy")
    for translation in texts(greedy["translations"]):
        print(f"  {translation}")

    # Decoding settings per sentence: length penalty alpha, and output length beyond the input's.
    count = len(sentences)
    options = model.signatures["translate_with_options"](
        inputs=inputs, alpha=tf.fill([count], 1.0), max_extra_length=tf.fill([count], 10)
    )
    print("\ntranslate_with_options (alpha 1.0, at most 10 tokens more than the input)")
    for translation in texts(options["translations"]):
        print(f"  {translation}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
