"""Masked sparse cross-entropy with label smoothing (Szegedy et al. 2016)."""

import keras
import tensorflow as tf
from keras import ops


def _sum_over_replicas(value):
    """Sums `value` over the replicas of the current `tf.distribute` step.

    Outside a replica context (or with one replica) returns `value`.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def token_cross_entropy(targets, logits, label_smoothing=0.0):
    """Per-token cross-entropy against `(1 - ε)·one_hot + ε / V`, no one-hot.

    With log p = logits − logsumexp(logits):
    loss = (1 − ε)·(−log p[y]) + ε·mean_k(−log p[k]).

    Args:
        targets: `(B, T)` integer ids.
        logits: `(B, T, V)`.
        label_smoothing: ε.

    Returns:
        `(B, T)` float32 losses (padding included; mask them yourself).
    """
    logits = ops.cast(logits, "float32")
    log_normalizer = ops.logsumexp(logits, axis=-1)
    true_logit = ops.take_along_axis(
        logits, ops.expand_dims(ops.cast(targets, "int32"), -1), axis=-1
    )[..., 0]
    loss = log_normalizer - true_logit
    if label_smoothing:
        uniform = log_normalizer - ops.mean(logits, axis=-1)
        loss = (1.0 - label_smoothing) * loss + label_smoothing * uniform
    return loss


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCrossEntropy(keras.losses.Loss):
    """Mean cross-entropy over the non-padding target tokens of the batch.

    The mean is over the tokens of the *global* batch: under a
    `tf.distribute` strategy every replica divides its token sum by the
    token count of all replicas, so the summed gradients equal one device
    training on the whole batch, whatever the padding of each replica.

    Args:
        label_smoothing: ε, the probability mass spread evenly over the
            vocabulary (0.1 in the Transformer paper).
        pad_id: the target id that is ignored.

    Example:

    >>> loss = MaskedSparseCrossEntropy(label_smoothing=0.1)
    >>> float(loss(np.array([[4, 0]]), np.zeros((1, 2, 8))))  # log 8
    2.0794...
    """

    def __init__(self, label_smoothing=0.0, pad_id=0, name="masked_cross_entropy", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        targets = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(targets, self.pad_id), "float32")
        losses = token_cross_entropy(targets, y_pred, self.label_smoothing) * mask
        count = _sum_over_replicas(ops.sum(mask))
        return losses / ops.maximum(count, 1.0)

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "pad_id": self.pad_id})
        config.pop("reduction", None)
        return config
