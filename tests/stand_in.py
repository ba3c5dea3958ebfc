"""A stand-in for the translator, for tests of what surrounds a SavedModel rather than of its
graph: the versions export() numbers, writes and cleans up, the processes that load them.

    path = export(StandInTranslator(), base)    # base/<next>/, written as any export is

Its signatures take and give what the translator's `serving_default` and `greedy` do
(strings `[B]` -> translations `[B]`, scores `[B]`), in a few ops: each "translation" is its
input in capitals, scored minus its length in bytes. The tiny model's signatures take
about 20 s of CPU to trace and save, and a process about 10 s to load and warm them up;
this one takes well under a second.
"""

import tensorflow as tf


class StandInTranslator(tf.Module):
    """What export() needs of a translator: a tracked module and its `signatures()`."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, inputs):
        return {"translations": tf.strings.upper(inputs), "scores": -tf.cast(tf.strings.length(inputs), tf.float32)}

    def signatures(self):
        return {"serving_default": self.serve, "greedy": self.serve}
