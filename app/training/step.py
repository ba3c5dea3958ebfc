"""The distributed steps: one optimizer update, several updates in one call (as Keras's
`steps_per_execution`), and one validation batch's sums, each a single `tf.function` that
runs on every replica and sums over them.

The loss is normalized by the non-padding target tokens of the whole global batch (every
replica, every accumulated micro-batch), so that 1 replica and 8 give the same update.
A guided run (`guidance`, app/training/guidance.py) adds its alignment loss, weighted, to
the summed token loss before that division, and its batches are `(source, target, gold)`.
"""

import keras
import tensorflow as tf

from app.decoding.alignment import select_head
from app.model.transformer import Transformer
from app.training.alignment_loss import guided_alignment_sum
from app.training.losses import summed_loss, summed_loss_and_nll
from app.training.optimizer import last_learning_rate
from app.training.output_loss import projected_loss_sum
from layers.special_tokens import PAD_ID


def make_train_step(
    model, optimizer, strategy, label_smoothing, accumulate=1, jit=False, fused_loss=True, batch_spec=None,
    guidance=None,
):
    """Returns `step(micro_batches) -> (loss_sum, target_tokens)`, both global; with
    `guidance`, `(loss_sum, target_tokens, alignment_sum)`.

    `micro_batches` is a tuple of `accumulate` distributed `(source [B, S], target [B, T])`
    batches. Each replica computes the gradient of its summed token losses divided by the
    number of non-padding target tokens in the whole global batch; the optimizer sums
    gradients over replicas, so the update is that of the global mean token loss,
    however the batch was split.

    `batch_spec`, the distributed dataset's `element_spec`: one trace of the step then
    serves batches of every shape (`_summed_over_replicas`).

    `fused_loss` projects the decoder states onto the vocabulary inside the loss, a slice
    of real target positions at a time (`app.training.output_loss`), instead of making the whole
    `[B, T, V]` logits; the two give the same loss and gradients. Under XLA (`jit`) the
    plain path is used: XLA fuses it itself and wants static shapes.

    `guidance`, a `app.training.guidance.Guidance` (None: not guided): the batches are
    `(source, target, gold uint8 [B, T - 1, S])`, and each replica's gradient is that of
    (summed token losses + weight x summed alignment loss) / global target tokens.
    `loss_sum` stays the token loss alone; `alignment_sum` is the unweighted alignment loss.
    """
    replica_step = _replica_update(model, optimizer, label_smoothing, jit, fused_loss, guidance)
    micro_batches_spec = None if batch_spec is None else tuple([batch_spec] * accumulate)
    return _summed_over_replicas(strategy, replica_step, micro_batches_spec)


def make_train_steps(
    model, optimizer, strategy, label_smoothing, accumulate=1, jit=False, fused_loss=True, progress=None,
    guidance=None,
):
    """Returns `steps(iterator, count) -> (loss_sums, target_tokens, learning_rates)`: up to
    `count` updates in one call, so that the host waits for the device once per call (with
    `guidance`, `make_train_step`'s, a fourth: `alignment_sums`, float32 [n]).

    Each update is `make_train_step`'s, on the next `accumulate` batches that the graph takes
    from `iterator` (a distributed dataset's iterator). The updates stop early where the data
    ends: the batches left, fewer than `accumulate`, are dropped, as at any epoch's end.

    Args of `steps`:
        iterator: an iterator of the distributed dataset of `(source [B, S], target [B, T])`
            batches; a new one (the next epoch's) of the same `element_spec` is no new trace.
        count: int32 scalar tensor, the most updates to make (a tensor, so that every
            count shares one trace).

    Returns of `steps`, one entry per update made, n <= count of them:
        loss_sums: float32 [n], the global summed token losses.
        target_tokens: float32 [n], the global non-padding target tokens.
        learning_rates: float32 [n], the rate of each update.

    `progress`, a `checkpoints.Progress`, is advanced in the graph by each update (a step
    and `accumulate` batches), so that the data position always matches the weights, even
    when an interrupt comes before the host has read the call's results.
    """
    replica_step = _replica_update(model, optimizer, label_smoothing, jit, fused_loss, guidance)

    def update(micro_batches):
        per_replica = strategy.run(replica_step, args=(micro_batches,))
        loss_sum, tokens, *alignment_sum = (
            strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None) for value in per_replica
        )
        if progress is not None:
            progress.advance(accumulate)
        return (loss_sum, tokens, last_learning_rate(optimizer), *alignment_sum)

    @tf.function
    def steps(iterator, count):
        results = [tf.TensorArray(tf.float32, size=0, dynamic_size=True) for _ in range(3 + (guidance is not None))]
        made, data_left = tf.constant(0), tf.constant(True)
        while made < count and data_left:
            optionals = [iterator.get_next_as_optional() for _ in range(accumulate)]
            data_left = tf.reduce_all(tf.stack([optional.has_value() for optional in optionals]))
            if data_left:
                values = update(tuple(optional.get_value() for optional in optionals))
                results = [result.write(made, value) for result, value in zip(results, values)]
                made += 1
        return tuple(result.stack() for result in results)

    return steps


def _replica_update(model, optimizer, label_smoothing, jit, fused_loss, guidance=None):
    """`replica_step(micro_batches) -> (loss_sum, local_tokens)`, with `guidance` and
    `alignment_sum` after them: one update, run on each replica."""
    variables = model.trainable_variables
    scale_loss = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    transformer = Transformer(model)
    fused_loss = fused_loss and not jit

    def summed_token_loss(source, target):
        labels = target[:, 1:]  # [B, T-1]
        if not fused_loss:
            logits = model([source, target[:, :-1]], training=True)  # [B, T-1, V]
            return summed_loss(labels, logits, label_smoothing)[0]
        memory, memory_mask = transformer.encode(source, training=True)
        states = transformer.decoder_states(target[:, :-1], memory, memory_mask, training=True)  # [B, T-1, D]
        return _projected_loss(transformer, states, labels, label_smoothing)

    def summed_guided_losses(source, target, gold):
        """(the summed token losses, the summed alignment loss), from one forward pass
        that returns the decoder's cross-attention weights (taken before dropout)."""
        labels = target[:, 1:]  # [B, T-1]
        memory, memory_mask = transformer.encode(source, training=True)
        if fused_loss:
            states, _, cross = transformer.decoder_states(
                target[:, :-1], memory, memory_mask, training=True, return_attention_scores=True
            )  # [B, T-1, D], each layer's [B, H, T-1, S]
            token_sum = _projected_loss(transformer, states, labels, label_smoothing)
        else:
            logits, _, cross = transformer.decode(
                target[:, :-1], memory, memory_mask, training=True, return_attention_scores=True
            )  # [B, T-1, V]
            token_sum = summed_loss(labels, logits, label_smoothing)[0]
        attention = select_head(cross[guidance.head.layer], guidance.head.head)  # float32 [B, T-1, S]
        return token_sum, guided_alignment_sum(attention, gold, guidance.cost_type)

    def loss_and_grads(source, target, gold, global_tokens):
        with tf.GradientTape() as tape:
            if guidance is None:
                loss_sum, alignment_sum = summed_token_loss(source, target), 0.0
                normalized = loss_sum / global_tokens
            else:
                loss_sum, alignment_sum = summed_guided_losses(source, target, gold)
                normalized = (loss_sum + guidance.weight * alignment_sum) / global_tokens
            if scale_loss:
                normalized = optimizer.scale_loss(normalized)
        grads = tape.gradient(normalized, variables)
        return loss_sum, alignment_sum, grads

    if jit:
        loss_and_grads = tf.function(loss_and_grads, jit_compile=True, reduce_retracing=True)

    def replica_step(micro_batches):
        context = tf.distribute.get_replica_context()
        local_tokens = tf.add_n([_target_tokens(batch[1]) for batch in micro_batches])
        global_tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, local_tokens)
        # A step whose batches are all padding (possible on one worker at an epoch's end)
        # contributes nothing rather than dividing by zero.
        global_tokens = tf.maximum(global_tokens, 1.0)
        total_loss, total_alignment, total_grads = 0.0, 0.0, None
        for batch in micro_batches:
            # An unguided run reads no gold, even from batches that carry one.
            gold = batch[2] if guidance is not None else None
            loss_sum, alignment_sum, grads = loss_and_grads(batch[0], batch[1], gold, global_tokens)
            grads = [tf.convert_to_tensor(g) for g in grads]  # embeddings give IndexedSlices
            total_grads = grads if total_grads is None else [a + b for a, b in zip(total_grads, grads)]
            total_loss += loss_sum
            total_alignment += alignment_sum
        optimizer.apply_gradients(zip(total_grads, variables))
        if guidance is None:
            return total_loss, local_tokens
        return total_loss, local_tokens, total_alignment

    return replica_step


def _projected_loss(transformer, states, labels, label_smoothing):
    """The summed token losses of decoder states `[B, T-1, D]` against `labels` `[B, T-1]`,
    projected a slice of real positions at a time (`app.training.output_loss`)."""
    real = labels != PAD_ID
    return projected_loss_sum(
        tf.boolean_mask(states, real), transformer.output_matrix(), tf.boolean_mask(labels, real), label_smoothing
    )


def _target_tokens(target):
    """Non-padding label tokens of a `[B, T]` target batch (the start token is no label)."""
    return tf.reduce_sum(tf.cast(target[:, 1:] != PAD_ID, tf.float32))


def make_eval_step(model, strategy, label_smoothing, batch_spec=None):
    """Returns `step(batch) -> (smoothed_loss_sum, nll_sum, target_tokens)` on a distributed batch.

    `batch_spec` is as for `make_train_step`.

    The smoothed loss is what training minimizes; the plain negative log-likelihood gives
    the perplexity, which stays comparable between models trained with different
    label smoothing (the paper's Table 3 reports it).
    """

    def replica_step(batch):
        source, target = batch
        logits = model([source, target[:, :-1]], training=False)
        return summed_loss_and_nll(target[:, 1:], logits, label_smoothing)

    return _summed_over_replicas(strategy, replica_step, batch_spec)


def _summed_over_replicas(strategy, replica_step, batch_spec=None):
    """`step(batch) -> sums`: runs `replica_step` on every replica and sums each output.

    Batches come in many shapes (`data.buckets`). With `batch_spec` (dimensions None) one
    trace serves them all. Without it, reduce_retracing traces again for each new pattern
    of shapes until the dimensions are unknown, up to three traces; those of the training
    and the evaluation step count together in TensorFlow's "triggered tf.function
    retracing" warning, since both are this closure, and reach its five at the first
    evaluation of a run whose first batches differ in shape.
    """
    tracing = dict(reduce_retracing=True) if batch_spec is None else dict(input_signature=[batch_spec])

    @tf.function(**tracing)
    def step(batch):
        per_replica = strategy.run(replica_step, args=(batch,))
        return tuple(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None) for value in per_replica)

    return step


def distribute(strategy, dataset):
    """Splits each global batch of `dataset` into one slice per replica of every worker.

    The batches are not made by a `batch` op, so `tf.distribute` cuts each into
    `num_replicas_in_sync` row slices and, under MultiWorkerMirroredStrategy, hands every
    worker its own slices of every batch (DATA sharding of the slices): all workers run
    the same number of steps on the same global batches as one process with that many
    replicas. DATA is set explicitly because AUTO would shard by files (each worker a
    different number of batches, and a hang at the epoch's end) should the input ever
    be read from files.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(dataset.with_options(options))
