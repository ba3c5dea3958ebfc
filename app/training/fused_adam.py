"""Adam whose update of each variable is one fused TensorFlow op.

Keras's `Adam.update_step` writes the update as about a dozen ops per variable (two
moment updates, a square root, a division, three assignments, ...), each a separate
pass over the variable and a separate kernel launch. TensorFlow's `ResourceApplyAdam`
does the same arithmetic in one kernel and one pass (its share of a step: docs/results.md
and the lab notebook, "Speed").

The arithmetic is Keras's own, term for term (TensorFlow's CPU kernel writes it the
same way):

    m <- m + (1 - beta_1) (g - m)
    v <- v + (1 - beta_2) (g^2 - v)
    alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)
    variable <- variable - alpha m / (sqrt(v) + epsilon)

with the same variables (`iterations`, the momentums and velocities), so checkpoints
move freely between this optimizer and Keras's. Other backends, `amsgrad` and variables
that are not float32 take Keras's path.

AdamW's decay, variable <- variable - variable * (weight_decay * lr), is Keras's too,
with its two scalars multiplied first as written: Keras writes variable * wd * lr and
leaves the order to TensorFlow's graph optimizer, which reassociates it on one replica
and not on another (where the scalars come from another device), so mirrored replicas
drifted apart by a rounding within a few steps (docs/training.md#replicas).
"""

import keras

# The variables weight decay leaves alone, by name: `Dense` biases and
# `LayerNormalization`'s gamma and beta, the model's only vectors (and
# `ScaleNormalization`'s scalar gamma)
# (tests/training/test_optimizer.py pins that every matrix is decayed and no vector is). The shared
# embedding is decayed too, at the matrices' rate, the choice that held up on validation
# (docs/lab-notebook/2026-11-21-en-de-what-was-tried.md).
# Here, and not in app/training/optimizer.py, so that TensorFlow-free tools (benchmarks/gpu) share
# it.
NOT_DECAYED = ("bias", "gamma", "beta")


@keras.saving.register_keras_serializable(package="transformer")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam`, updating each variable with one `ResourceApplyAdam`."""

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None or keras.backend.backend() != "tensorflow":
            return super()._apply_weight_decay(variables)
        import tensorflow as tf

        def decay(variable):
            if self._use_weight_decay(variable):
                factor = tf.cast(self.weight_decay, variable.dtype) * tf.cast(self.learning_rate, variable.dtype)
                variable.assign_sub(variable * factor)

        def decay_every_replica(strategy, variables):
            for variable in variables:
                target = variable.value if isinstance(variable, keras.Variable) else variable
                strategy.extended.update(target, decay, group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(decay_every_replica, self._distribution_strategy, variables)

    def update_step(self, gradient, variable, learning_rate):
        if keras.backend.backend() != "tensorflow" or self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        # Inside `Strategy.extended.update`, `variable` is one replica's tf.Variable;
        # a distributed moment variable's `.handle` is that same replica's component.
        target = variable.value if isinstance(variable, keras.Variable) else variable
        if target.dtype != tf.float32:
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        momentum, velocity = self._momentums[index].value, self._velocities[index].value
        # A sparse gradient (an embedding's lookups) is applied densely, a row looked up
        # twice by the sum of its slices: the true gradient, and what the train step,
        # which densifies its gradients, feeds anyway. (Keras's own arithmetic on
        # IndexedSlices squares such slices one by one.)
        gradient = tf.cast(tf.convert_to_tensor(gradient), tf.float32)
        step = tf.cast(self.iterations + 1, tf.float32)
        beta_1 = tf.constant(self.beta_1, tf.float32)
        beta_2 = tf.constant(self.beta_2, tf.float32)
        return tf.raw_ops.ResourceApplyAdam(
            var=target.handle,
            m=momentum.handle,
            v=velocity.handle,
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, tf.float32),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.constant(self.epsilon, tf.float32),
            grad=gradient,
            use_locking=False,
        )
