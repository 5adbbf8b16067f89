"""Losses: masked sparse cross-entropy with label smoothing (Szegedy et al. 2016), BERT's.

Under a `tf.distribute` strategy the runner's steps call a loss on every
replica and sum the gradients, so each loss returns its replica's share of
the global batch's mean: sums divided by the count over all replicas.
"""

import keras
import tensorflow as tf
from keras import ops
from tensorflow.python.ops import control_flow_util  # no public test for "inside XLA"

from keras_attn import graph
from keras_attn.layers.replicas import sum_over_replicas
from pipelines.special_tokens import PAD_ID

# XLA compiles the smoothed loss once per batch shape (dozens of shapes a run) and saves about
# 5 ns a logit: over an epoch that pays back for large vocabularies only.
XLA_FROM_VOCABULARY = 4096


def token_cross_entropy(targets, logits, label_smoothing=0.0):
    """Per-token cross-entropy against q = `(1 - ε)·one_hot + ε / V`.

    loss = −Σ_k q_k log p_k = (1 − ε)·(−log p[y]) + ε·mean_k(−log p[k])
         = log Σ_k exp(l_k) − (1 − ε)·l[y] − ε·mean_k(l_k).
    Over `XLA_FROM_VOCABULARY` logits or more a row, that last form as one
    XLA cluster (`_cross_entropy`), forward and backward about twice as
    fast on CPU as TensorFlow's fused ops; smaller vocabularies use the fused
    op against a dense q (smoothed) or the sparse one (ε = 0).

    Args:
        targets: int tensor of shape `(B, T)`. The target ids.
        logits: float tensor of shape `(B, T, V)`. The logits over a vocabulary of `V` tokens.
        label_smoothing: float. ε, the probability mass spread evenly over the `V` tokens.
            Defaults to 0.0 (no smoothing).

    Returns:
        A float32 tensor of shape `(B, T)`: the losses, padding included (mask them yourself).
    """
    vocabulary_size = ops.shape(logits)[-1]
    flat_logits = ops.reshape(ops.cast(logits, "float32"), (-1, vocabulary_size))
    flat_targets = ops.reshape(ops.cast(targets, "int32"), (-1,))
    if isinstance(vocabulary_size, int) and vocabulary_size >= XLA_FROM_VOCABULARY:
        losses = _cross_entropy(flat_logits, flat_targets, float(label_smoothing))
    elif label_smoothing:
        uniform = label_smoothing / vocabulary_size
        smoothed = tf.one_hot(
            flat_targets,
            vocabulary_size,
            on_value=1.0 - label_smoothing + uniform,
            off_value=uniform,
            dtype="float32",
        )
        losses = tf.nn.softmax_cross_entropy_with_logits(labels=smoothed, logits=flat_logits)
    else:
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=flat_targets, logits=flat_logits
        )
    return ops.reshape(losses, ops.shape(targets))


def _cross_entropy(logits, targets, label_smoothing):
    """`(N,)` losses of `(N, V)` float32 logits: log Σ exp(l) − (1 − ε)·l[y] − ε·mean(l).

    Compiled by XLA as a cluster of its own, except inside a function XLA
    already compiles (`jit_compile=True`, e.g. Keras's train step on a GPU),
    which compiles it with the rest: an XLA function called there with a
    gradient taken through it was compiled again at every call.
    `label_smoothing` is a Python float, so ε = 0 traces no mean.
    """
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return _log_sum_exp_cross_entropy(logits, targets, label_smoothing)
    return _compiled_cross_entropy(logits, targets, label_smoothing)


def _log_sum_exp_cross_entropy(logits, targets, label_smoothing):
    shift = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
    log_sum_exp = tf.math.log(tf.reduce_sum(tf.exp(logits - shift), axis=-1)) + shift[:, 0]
    gold = tf.gather(logits, targets, batch_dims=1)
    if not label_smoothing:
        return log_sum_exp - gold
    return (
        log_sum_exp
        - (1.0 - label_smoothing) * gold
        - label_smoothing * tf.reduce_mean(logits, axis=-1)
    )


_compiled_cross_entropy = graph.function(_log_sum_exp_cross_entropy, jit_compile=True)


def token_negative_log_likelihood(targets, logits):
    """Per-token −log p[y] = logsumexp(logits) − logits[y], for metrics.

    The same value as `token_cross_entropy` without smoothing, at about
    half its cost: TensorFlow's fused op also computes a gradient. From
    `XLA_FROM_VOCABULARY` logits a row, the loss's XLA cluster with ε = 0.

    Args:
        targets: int tensor of any shape `(...)`. The target ids.
        logits: float tensor of shape `(..., V)`. The logits: `targets`' shape and the
            vocabulary axis.

    Returns:
        A float32 tensor shaped like `targets`: the losses, padding included.
    """
    logits = tf.cast(logits, "float32")
    targets = tf.cast(targets, "int32")
    vocabulary_size = logits.shape[-1]
    if isinstance(vocabulary_size, int) and vocabulary_size >= XLA_FROM_VOCABULARY:
        flat = _cross_entropy(
            tf.reshape(logits, (-1, vocabulary_size)), tf.reshape(targets, (-1,)), 0.0
        )
        return tf.reshape(flat, tf.shape(targets))
    target_logits = tf.gather(logits, targets[..., None], batch_dims=len(targets.shape))[..., 0]
    return tf.reduce_logsumexp(logits, axis=-1) - target_logits


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCrossEntropy(keras.losses.Loss):
    """Mean cross-entropy over the non-padding target tokens of the batch.

    The mean is over the tokens of the *global* batch: under a
    `tf.distribute` strategy every replica divides its token sum by the
    token count of all replicas, so the summed gradients equal one device
    training on the whole batch, whatever the padding of each replica.

    Args:
        label_smoothing: float. ε, the probability mass spread evenly over the
            vocabulary (0.1 in the Transformer paper). Defaults to 0.0.
        pad_id: int. The target id that is ignored. Defaults to 0 (`PAD_ID`).
        name: str. The loss's name. Defaults to `"masked_cross_entropy"`.
        **kwargs: Other arguments of `keras.losses.Loss`, such as `dtype`. A `reduction` is
            ignored: the loss is always the sum of the tokens' shares of the mean (`"sum"`).

    Example:

        >>> loss = MaskedSparseCrossEntropy(label_smoothing=0.1)
        >>> float(loss(np.array([[4, 0]]), np.zeros((1, 2, 8))))  # log 8
        2.0794...
    """

    def __init__(self, label_smoothing=0.0, pad_id=PAD_ID, name="masked_cross_entropy", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        targets = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(targets, self.pad_id), "float32")
        losses = token_cross_entropy(targets, y_pred, self.label_smoothing) * mask
        count = sum_over_replicas(ops.sum(mask))
        return losses / ops.maximum(count, 1.0)

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "pad_id": self.pad_id})
        config.pop("reduction", None)
        return config


def count_rows(labels):
    """The batch size of `labels`, as a float32 scalar.

    Args:
        labels: tensor of shape `(B, ...)`. A batch, its rows along the first axis.

    Returns:
        A float32 scalar tensor: `B`.
    """
    return ops.cast(ops.shape(labels)[0], "float32")


def classification_losses(labels, logits):
    """The cross-entropy of each row of a batch of class logits.

    Args:
        labels: int tensor of shape `(B,)`. The class ids.
        logits: float tensor of shape `(B, C)`. The logits over `C` classes.

    Returns:
        A float32 tensor of shape `(B,)`: the cross-entropies.
    """
    return token_cross_entropy(ops.expand_dims(labels, 1), ops.expand_dims(logits, 1))[:, 0]


class PretrainingLoss:
    """Masked-LM loss (mean over masked tokens) plus next-sentence loss (mean over pairs).

    Args:
        nsp_weight: float. What the next-sentence loss counts for: 1 is BERT's sum,
            0 trains the masked LM alone (the NSP head then learns nothing). Defaults to 1.0.

    Call arguments:
        targets: dict. `{"mlm_labels": (B, P), "mlm_weights": (B, P), "nsp_labels": (B,)}`
            tensors: the ids at the `P` masked positions, their weights (1 for a masked token,
            0 for padding) and the next-sentence labels.
        outputs: dict. `{"mlm": (B, P, V), "nsp": (B, 2)}` logits; without `"nsp"`
            (a masked LM without the NSP head), the masked-LM loss alone.

    Returns:
        A float32 scalar: this replica's share of the global batch's loss.
    """

    def __init__(self, nsp_weight=1.0):
        self.nsp_weight = float(nsp_weight)

    def __call__(self, targets, outputs):
        weights = ops.cast(targets["mlm_weights"], "float32")
        mlm = ops.sum(token_cross_entropy(targets["mlm_labels"], outputs["mlm"]) * weights)
        mlm = mlm / ops.maximum(sum_over_replicas(ops.sum(weights)), 1.0)
        if "nsp" not in outputs:
            return mlm
        nsp = ops.sum(classification_losses(targets["nsp_labels"], outputs["nsp"]))
        nsp = nsp / ops.maximum(sum_over_replicas(count_rows(targets["nsp_labels"])), 1.0)
        return mlm + self.nsp_weight * nsp


class ClassificationLoss:
    """Mean cross-entropy over the global batch, for `(B,)` labels and `(B, C)` logits.

    Call arguments:
        labels: int tensor of shape `(B,)`. The class ids.
        logits: float tensor of shape `(B, C)`. The logits over `C` classes.

    Returns:
        A float32 scalar: this replica's share of the global batch's mean.
    """

    def __call__(self, labels, logits):
        losses = classification_losses(labels, logits)
        return ops.sum(losses) / ops.maximum(sum_over_replicas(count_rows(labels)), 1.0)
