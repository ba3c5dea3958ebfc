"""The four reserved token ids, the same in every part of the project.

The subword model is trained with them (`data/tokenizer.py` passes them to the
sentencepiece trainer as its pad, bos, eos and unk ids, and refuses a model file that
reserves others), so every id below is also what the vocabulary file says it is. The
model, the loss, the masks, decoding, the export and the benchmarks import them from
here; this module imports nothing, so that code without TensorFlow (the JAX tools in
`benchmarks/gpu/`) can too.
"""

# Padding: fills a batch's rows to one length. Masked out of attention (`layers/masks.py`)
# and of the loss, and never a decoder output.
PAD_ID = 0
# Start of sentence: the decoder's first input, before the target's first piece; never
# an output.
START_ID = 1
# End of sentence: the last id of every source and target sentence; decoding stops a
# sentence when it outputs it.
END_ID = 2
# Unknown piece. With the tokenizer's byte fallback any text has pieces, so it is never
# produced; it stays reserved because sentencepiece requires an unknown id.
UNKNOWN_ID = 3
