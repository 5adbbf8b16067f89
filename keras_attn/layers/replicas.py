"""A loss under `tf.distribute`, as a layer adds it: sums over the replicas of a step, and a
replica's share of the global batch's mean in the form `add_loss` takes."""

import tensorflow as tf


def sum_over_replicas(value):
    """Sums `value` over the replicas of the current `tf.distribute` step.

    Args:
        value: tensor. This replica's value.

    Returns:
        A tensor of the shape of `value`: the sum over the replicas, or `value`
        itself outside a replica context (or with one replica).
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def as_layer_loss(share):
    """A replica's share of the global batch's mean loss, as a layer's `add_loss` takes it.

    Keras's TensorFlow trainer divides each layer loss by the replicas in
    sync (it takes one for its replica's own mean); a share of the global
    mean is multiplied back, so the replicas' summed gradients equal one
    device's on the whole batch.

    Args:
        share: scalar tensor. This replica's share of the global batch's mean loss.

    Returns:
        A scalar tensor: `share` times the number of replicas in sync.
    """
    return share * tf.distribute.get_strategy().num_replicas_in_sync  # what Keras divides by
