"""Training steps on 1 replica and on 8 mirrored CPU replicas, from the same weights.

Run as a script (`python -m tests.replica_equivalence OPTIMIZER...`): splitting the CPU into
logical devices must happen before TensorFlow starts, so it cannot share the test
process. Prints a JSON object a line for each optimizer, in the order given: the losses,
the largest weight difference, and the output difference with what the weights' own
differences explain of it.

`python -m tests.replica_equivalence guided` compares 1 replica with 2 instead, with SGD
and guided alignment on (a gold alignment per batch, the loss's weight 0.5), and reports
the alignment losses too (tests/training/test_guided_alignment.py).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from app.training.strategy import make_strategy  # noqa: E402  (before TensorFlow starts)

REPLICAS = 8
STEPS = 3
OPTIMIZERS = ("sgd", "adam", "adamw")
GUIDED = "guided"  # the argument that runs the guided alignment comparison
GUIDED_REPLICAS = 2


def main(optimizer_names):
    if list(optimizer_names) == [GUIDED]:
        strategy = make_strategy("mirrored", cpu_replicas=GUIDED_REPLICAS)
        print(json.dumps({"optimizer": "sgd", **compare(strategy, "sgd", guided=True)}), flush=True)
        return
    strategy = make_strategy("mirrored", cpu_replicas=REPLICAS)
    for name in optimizer_names:
        print(json.dumps({"optimizer": name, **compare(strategy, name)}), flush=True)


def compare(strategy, optimizer_name, guided=False):
    """`STEPS` updates of one model on 1 replica and of a copy on `strategy`'s replicas, from
    the same weights and the same global batch; returns what the test checks. `guided`:
    with guided alignment, its head layer 0's head 1, on a gold alignment of the batch."""
    import keras
    import numpy as np
    import tensorflow as tf

    from app.decoding.config import AlignmentHead
    from app.model.config import ModelConfig
    from app.training.guidance import Guidance
    from app.training.strategy import replica_differences
    from app.training.step import make_train_step

    config = ModelConfig.from_size(
        "tiny", vocab_size=50, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0
    )
    source, target = _batch()
    guidance = Guidance(AlignmentHead(0, 1), weight=0.5) if guided else None
    keras.utils.set_random_seed(0)
    single_model, single_optimizer = _model_and_optimizer(config, optimizer_name, tf.distribute.get_strategy())
    mirrored_model, mirrored_optimizer = _model_and_optimizer(config, optimizer_name, strategy)
    mirrored_model.set_weights(single_model.get_weights())

    single_step = make_train_step(single_model, single_optimizer, tf.distribute.get_strategy(), 0.1, guidance=guidance)
    mirrored_step = make_train_step(mirrored_model, mirrored_optimizer, strategy, 0.1, guidance=guidance)
    batch = (tf.constant(source), tf.constant(target)) + ((tf.constant(_gold(source, target)),) if guided else ())
    distributed = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch))))

    losses, alignment_losses = [], []
    for _ in range(STEPS):
        single_loss, single_tokens, *single_alignment = single_step((batch,))
        mirrored_loss, mirrored_tokens, *mirrored_alignment = mirrored_step((distributed,))
        losses.append([float(single_loss / single_tokens), float(mirrored_loss / mirrored_tokens)])
        if guided:
            alignment_losses.append([float(single_alignment[0] / single_tokens),
                                     float(mirrored_alignment[0] / mirrored_tokens)])
    changes = {  # mirrored - single
        a.path: np.asarray(b) - np.asarray(a) for a, b in zip(single_model.weights, mirrored_model.weights)
    }
    # Attention key biases add q.b to every score of a query alike, which the softmax
    # ignores: their true gradient is zero and what they receive is rounding noise, which
    # Adam (g / (|g| + 1e-9)) turns into full-size steps in both runs alike. They change
    # nothing the model computes (see output_beyond_first_order), so they are reported apart.
    # (The default model has no attention biases; `default` covers it.)
    weight_difference = max(float(np.abs(v).max()) for k, v in changes.items() if not _is_key_bias(k))
    key_bias_difference = max((float(np.abs(v).max()) for k, v in changes.items() if _is_key_bias(k)), default=0.0)
    output_change = np.asarray(mirrored_model([source, target])) - np.asarray(single_model([source, target]))
    explained = _first_order_output_change(single_model, changes, [source, target])  # [B, T, V]
    return {
        "replicas": strategy.num_replicas_in_sync,
        "losses": losses,
        **({"alignment_losses": alignment_losses} if guided else {}),
        "max_weight_difference": weight_difference,
        "key_bias_difference": key_bias_difference,
        "output_difference": float(np.abs(output_change).max()),
        "output_beyond_first_order": float(np.abs(output_change - explained).max()),
        # Every replica's copy of every weight and optimizer variable, against the first.
        "replica_differences": replica_differences([*mirrored_model.weights, *mirrored_optimizer.variables]),
    }


def _batch():
    """`(source [16, 7], target [16, 9])` int32 ids, 0 = padding."""
    import numpy as np

    rng = np.random.default_rng(7)
    source = rng.integers(3, 50, (16, 7)).astype("int32")
    target = rng.integers(3, 50, (16, 9)).astype("int32")
    # Rows of very different lengths, so each replica's 2 rows hold a different number
    # of tokens: per-replica normalization would give a different update.
    for row in range(16):
        target[row, 2 + row % 7 :] = 0
        source[row, 3 + row % 4 :] = 0
    return source, target


def _gold(source, target):
    """uint8 [16, 8, 7]: a gold alignment of `_batch()`, each real label linked to one or two
    real source pieces, some to none."""
    import numpy as np

    rng = np.random.default_rng(8)
    gold = (rng.random((target.shape[0], target.shape[1] - 1, source.shape[1])) < 0.2).astype("uint8")
    gold *= (target[:, 1:] != 0)[:, :, None] & (source != 0)[:, None, :]
    return gold


def _model_and_optimizer(config, optimizer_name, strategy):
    import keras

    from app.model.transformer import build_transformer
    from app.training.config import TrainConfig
    from app.training.optimizer import make_optimizer

    with strategy.scope():
        model = build_transformer(config)
        if optimizer_name == "sgd":
            optimizer = keras.optimizers.SGD(learning_rate=0.5)
        else:  # "adam", or "adamw": with weight decay, strong enough to show
            weight_decay = 0.2 if optimizer_name == "adamw" else 0.0
            train_config = TrainConfig(train_steps=10, warmup_steps=2, weight_decay=weight_decay)
            optimizer = make_optimizer(config, train_config, 10)
        optimizer.build(model.trainable_variables)
    return model, optimizer


def _is_key_bias(path):
    return path.endswith("key/bias")


def _first_order_output_change(model, changes, inputs):
    """d output / d w . dw, summed over every weight w but the key biases, for `changes`
    (`{path: dw}`, of the weights' shapes): [B, T, V]. What the weights' changes make
    of the outputs, to first order."""
    import tensorflow as tf

    weights = [w for w in model.trainable_weights if not _is_key_bias(w.path)]
    tangents = [tf.constant(changes[w.path]) for w in weights]
    with tf.autodiff.ForwardAccumulator([w.value for w in weights], tangents) as accumulator:
        outputs = model(inputs)  # [B, T, V]
    return accumulator.jvp(outputs).numpy()


if __name__ == "__main__":
    main(sys.argv[1:] or OPTIMIZERS)
