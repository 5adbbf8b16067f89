"""What BERT's jobs train with: losses, metrics and the learning-rate schedule.

The runner's steps call `loss(targets, outputs)` on every replica and sum
the gradients, so each loss here returns its replica's share of the global
batch's mean: sums divided by the count over all replicas (masked tokens
for the MLM, rows for NSP and classification). One device and any number of
replicas then make the same update.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_attn.training import token_cross_entropy


def _global(value):
    """`value` summed over the replicas of the current step (itself outside one)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def _rows(labels):
    return ops.cast(ops.shape(labels)[0], "float32")


def _classification_losses(labels, logits):
    """`(B,)` cross-entropies of `(B, C)` logits."""
    return token_cross_entropy(ops.expand_dims(labels, 1), ops.expand_dims(logits, 1))[:, 0]


class PretrainingLoss:
    """Masked-LM loss (mean over masked tokens) plus next-sentence loss (mean over pairs).

    Call arguments:
        targets: `{"mlm_labels": (B, P), "mlm_weights": (B, P), "nsp_labels": (B,)}`.
        outputs: `{"mlm": (B, P, V), "nsp": (B, 2)}` logits.

    Returns:
        This replica's share of the global batch's loss, a float32 scalar.
    """

    def __call__(self, targets, outputs):
        weights = ops.cast(targets["mlm_weights"], "float32")
        mlm = ops.sum(token_cross_entropy(targets["mlm_labels"], outputs["mlm"]) * weights)
        mlm = mlm / ops.maximum(_global(ops.sum(weights)), 1.0)
        nsp = ops.sum(_classification_losses(targets["nsp_labels"], outputs["nsp"]))
        return mlm + nsp / ops.maximum(_global(_rows(targets["nsp_labels"])), 1.0)


class ClassificationLoss:
    """Mean cross-entropy over the global batch, for `(B,)` labels and `(B, C)` logits."""

    def __call__(self, labels, logits):
        losses = _classification_losses(labels, logits)
        return ops.sum(losses) / ops.maximum(_global(_rows(labels)), 1.0)


class PretrainingMetrics(keras.metrics.Metric):
    """mlm_loss, mlm_accuracy, mlm_perplexity, nsp_loss and nsp_accuracy of BERT pretraining.

    MLM values are over the masked tokens (weight 1), NSP values over the
    pairs; all are running means since the last reset.

    Example:

    >>> metrics = PretrainingMetrics()
    >>> metrics.update_state(targets, model(features))
    >>> metrics.result()["mlm_accuracy"]
    """

    NAMES = ("mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy")

    def __init__(self, name="pretraining", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = {
            key: self.add_variable(shape=(), initializer="zeros", name=key)
            for key in ("mlm_loss", "mlm_correct", "mlm_count", "nsp_loss", "nsp_correct", "nsp_count")
        }

    def update_state(self, targets, outputs, sample_weight=None):
        weights = ops.cast(targets["mlm_weights"], "float32")
        labels = ops.cast(targets["mlm_labels"], "int32")
        mlm_logits = outputs["mlm"]
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(mlm_logits, -1), "int32"), labels), "float32")
        nsp_labels = ops.cast(targets["nsp_labels"], "int32")
        nsp_correct = ops.equal(ops.cast(ops.argmax(outputs["nsp"], -1), "int32"), nsp_labels)
        updates = {
            "mlm_loss": ops.sum(token_cross_entropy(labels, mlm_logits) * weights),
            "mlm_correct": ops.sum(correct * weights),
            "mlm_count": ops.sum(weights),
            "nsp_loss": ops.sum(_classification_losses(nsp_labels, outputs["nsp"])),
            "nsp_correct": ops.sum(ops.cast(nsp_correct, "float32")),
            "nsp_count": _rows(nsp_labels),
        }
        for key, value in updates.items():
            self.sums[key].assign_add(value)

    def result(self):
        mlm = lambda key: ops.divide_no_nan(self.sums[key], self.sums["mlm_count"])  # noqa: E731
        nsp = lambda key: ops.divide_no_nan(self.sums[key], self.sums["nsp_count"])  # noqa: E731
        return {
            "mlm_loss": mlm("mlm_loss"),
            "mlm_accuracy": mlm("mlm_correct"),
            "mlm_perplexity": ops.exp(mlm("mlm_loss")),
            "nsp_loss": nsp("nsp_loss"),
            "nsp_accuracy": nsp("nsp_correct"),
        }

    def reset_state(self):
        for variable in self.sums.values():
            variable.assign(0.0)


@keras.saving.register_keras_serializable(package="keras_attn")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's schedule: linear warm-up to `peak`, then linear decay to 0 at `total_steps`.

    Args:
        peak: the learning rate at the end of the warm-up.
        warmup_steps: steps of warm-up (BERT: 10,000 of 1M; fine-tuning:
            about a tenth of the run).
        total_steps: the run's steps; the rate is 0 from there on.

    Example:

    >>> schedule = WarmupLinearDecay(1e-4, warmup_steps=100, total_steps=1000)
    >>> [round(float(schedule(step)), 6) for step in (0, 50, 100, 550, 1000)]
    [0.0, 5e-05, 0.0001, 5e-05, 0.0]
    """

    def __init__(self, peak, warmup_steps, total_steps):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        decay = float(max(self.total_steps - self.warmup_steps, 1))
        rising = step / warmup
        falling = ops.maximum(0.0, (float(self.total_steps) - step) / decay)
        return self.peak * ops.where(step < self.warmup_steps, rising, falling)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def adamw(schedule, weight_decay=0.01, clipnorm=1.0):
    """BERT's optimizer: Adam with decoupled weight decay, none on biases and LayerNorm."""
    optimizer = keras.optimizers.AdamW(
        schedule, weight_decay=weight_decay, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clipnorm=clipnorm
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
