"""The model's dropout masks on N mirrored CPU replicas, every replica given the same rows.

Run as a script (`python -m tests.replica_dropout N`): splitting the CPU into logical
devices must happen before TensorFlow starts, so it cannot share the test process.
Prints a JSON object: which replicas' training outputs equal which, whether replica 0's
equal one replica's (the default strategy, the same weights and generator states), and
whether a second pass from the same states drew the same masks.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from app.training.strategy import make_strategy  # noqa: E402  (before TensorFlow starts)


def main(replicas):
    strategy = make_strategy("mirrored", cpu_replicas=replicas)
    import keras
    import numpy as np
    import tensorflow as tf

    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer
    from app.model_dir.checkpoints import random_states

    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2,
        dropout=0.3, attention_dropout=0.2, inner_dropout=0.2,
    )
    rng = np.random.default_rng(3)
    source = tf.constant(rng.integers(3, 40, (2, 6)), tf.int32)
    target = tf.constant(rng.integers(3, 40, (2, 5)), tf.int32)

    keras.utils.set_random_seed(1)
    single = build_transformer(config)
    with strategy.scope():
        mirrored = build_transformer(config)
    mirrored.set_weights(single.get_weights())
    start = [state.numpy() for state in random_states(single)]

    def restart():
        for model in (single, mirrored):
            for state, value in zip(random_states(model), start):
                state.assign(value)

    @tf.function
    def each_replica():
        # Every replica is given the same rows: only their masks can make them differ.
        return strategy.run(lambda: mirrored([source, target], training=True))

    # Both traced alike, so that their float rounding is alike too.
    one_replica = tf.function(lambda: single([source, target], training=True))

    def passes():
        restart()
        outputs = [np.asarray(value) for value in strategy.experimental_local_results(each_replica())]
        return outputs, np.asarray(one_replica())

    (outputs, one), (again, one_again) = passes(), passes()
    print(json.dumps({
        "replicas": len(outputs),
        "equal_pairs": [[a, b] for a in range(len(outputs)) for b in range(a + 1, len(outputs))
                        if np.array_equal(outputs[a], outputs[b])],
        "replica_0_equals_one_replica": bool(np.array_equal(outputs[0], one)),
        "same_on_a_second_pass": bool(all(np.array_equal(a, b) for a, b in zip(outputs, again))
                                      and np.array_equal(one, one_again)),
        "training_differs_from_inference": bool(
            not np.allclose(one, np.asarray(single([source, target], training=False)))
        ),
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]))
