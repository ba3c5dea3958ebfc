"""One training step on 1 replica and on 8 mirrored CPU replicas, from the same weights.

Run as a script (`python -m tests.replica_equivalence OPTIMIZER`): splitting the CPU into
logical devices must happen before TensorFlow starts, so it cannot share the test
process. Prints a JSON object with the losses and the largest weight difference.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from app.training.strategy import make_strategy  # noqa: E402  (before TensorFlow starts)

REPLICAS = 8
STEPS = 3


def main(optimizer_name):
    strategy = make_strategy("mirrored", cpu_replicas=REPLICAS)
    import keras
    import numpy as np
    import tensorflow as tf

    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer
    from app.training.config import TrainConfig
    from app.training.optimizer import make_optimizer
    from app.training.strategy import replica_differences
    from app.training.step import make_train_step

    config = ModelConfig.from_size(
        "tiny", vocab_size=50, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0
    )
    rng = np.random.default_rng(7)
    source = rng.integers(3, 50, (16, 7)).astype("int32")
    target = rng.integers(3, 50, (16, 9)).astype("int32")
    # Rows of very different lengths, so each replica's 2 rows hold a different number
    # of tokens: per-replica normalization would give a different update.
    for row in range(16):
        target[row, 2 + row % 7 :] = 0
        source[row, 3 + row % 4 :] = 0

    def make(optimizer_strategy):
        with optimizer_strategy.scope():
            model = build_transformer(config)
            if optimizer_name == "sgd":
                optimizer = keras.optimizers.SGD(learning_rate=0.5)
            else:  # "adam", or "adamw": with weight decay, strong enough to show
                weight_decay = 0.2 if optimizer_name == "adamw" else 0.0
                train_config = TrainConfig(train_steps=10, warmup_steps=2, weight_decay=weight_decay)
                optimizer = make_optimizer(config, train_config, 10)
            optimizer.build(model.trainable_variables)
        return model, optimizer

    keras.utils.set_random_seed(0)
    single_model, single_optimizer = make(tf.distribute.get_strategy())
    mirrored_model, mirrored_optimizer = make(strategy)
    mirrored_model.set_weights(single_model.get_weights())

    single_step = make_train_step(single_model, single_optimizer, tf.distribute.get_strategy(), 0.1)
    mirrored_step = make_train_step(mirrored_model, mirrored_optimizer, strategy, 0.1)
    batch = (tf.constant(source), tf.constant(target))
    distributed = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch))))

    losses = []
    for _ in range(STEPS):
        single_loss, single_tokens = single_step((batch,))
        mirrored_loss, mirrored_tokens = mirrored_step((distributed,))
        losses.append([float(single_loss / single_tokens), float(mirrored_loss / mirrored_tokens)])
    differences = {
        a.path: float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(single_model.weights, mirrored_model.weights)
    }
    # Attention key biases add q.b to every score of a query alike, which the softmax
    # ignores: their true gradient is zero and what they receive is rounding noise, which
    # Adam (g / (|g| + 1e-9)) turns into full-size steps in both runs alike. They change
    # nothing the model computes (see output_difference), so they are reported apart.
    # (The default model has no attention biases; `default` covers it.)
    weight_difference = max(v for k, v in differences.items() if not k.endswith("key/bias"))
    key_bias_difference = max((v for k, v in differences.items() if k.endswith("key/bias")), default=0.0)
    output_difference = float(np.max(np.abs(
        np.asarray(single_model([source, target])) - np.asarray(mirrored_model([source, target]))
    )))
    print(json.dumps({
        "replicas": strategy.num_replicas_in_sync,
        "losses": losses,
        "max_weight_difference": weight_difference,
        "key_bias_difference": key_bias_difference,
        "output_difference": output_difference,
        # Every replica's copy of every weight and optimizer variable, against the first.
        "replica_differences": replica_differences([*mirrored_model.weights, *mirrored_optimizer.variables]),
    }))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "adam")
