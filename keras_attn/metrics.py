"""Metrics: token-level ones that ignore padding, and BERT pretraining's."""

import keras
import tensorflow as tf
from keras import ops

from keras_attn.losses import (
    classification_losses,
    count_rows,
    token_negative_log_likelihood,
)
from pipelines.special_tokens import PAD_ID


def _predicted_ids(logits):
    """argmax over the last axis, as int32.

    `tf.argmax` itself: `keras.ops.argmax` adds passes over the logits (for
    −0.0 under flush-to-zero) that made the accuracy 10% of a Seq2Seq step.
    """
    return tf.argmax(logits, axis=-1, output_type="int32")


class _MaskedTokenMean(keras.metrics.Metric):
    """Running mean of a per-token value over non-padding targets."""

    def __init__(self, pad_id=PAD_ID, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        targets = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(targets, self.pad_id), "float32")
        values = self.token_values(targets, y_pred)
        self.total.assign_add(ops.sum(values * mask))
        self.count.assign_add(ops.sum(mask))

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedTokenAccuracy(_MaskedTokenMean):
    """Fraction of non-padding target tokens whose argmax prediction is right.

    Updated with target ids and their logits (the ids' shape and a vocabulary axis), as
    `MaskedSparseCrossEntropy` takes them.

    Args:
        pad_id: int. The target id that is not counted. Defaults to 0 (`PAD_ID`).
        name: str. The metric's name. Defaults to `"token_accuracy"`.
        **kwargs: Other arguments of `keras.metrics.Metric`, such as `dtype`.
    """

    def __init__(self, pad_id=PAD_ID, name="token_accuracy", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def token_values(self, targets, logits):
        return ops.cast(ops.equal(_predicted_ids(logits), targets), "float32")

    def result(self):
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedPerplexity(_MaskedTokenMean):
    """exp(mean negative log-likelihood) over non-padding target tokens.

    Computed without label smoothing, so it is a true perplexity. Updated with target ids and
    their logits (the ids' shape and a vocabulary axis), as `MaskedSparseCrossEntropy` takes them.

    Args:
        pad_id: int. The target id that is not counted. Defaults to 0 (`PAD_ID`).
        name: str. The metric's name. Defaults to `"perplexity"`.
        **kwargs: Other arguments of `keras.metrics.Metric`, such as `dtype`.
    """

    def __init__(self, pad_id=PAD_ID, name="perplexity", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def token_values(self, targets, logits):
        return token_negative_log_likelihood(targets, logits)

    def result(self):
        return ops.exp(ops.divide_no_nan(self.total, self.count))


class PretrainingMetrics(keras.metrics.Metric):
    """mlm_loss, mlm_accuracy, mlm_perplexity, nsp_loss and nsp_accuracy of BERT pretraining.

    MLM values are over the masked tokens (weight 1), NSP values over the
    pairs; all are running means since the last reset. `update_state(targets, outputs)` takes
    what `keras_attn.losses.PretrainingLoss` takes; `result()` is a dict of the values by name
    (`NAMES`, or `MLM_NAMES` without `nsp`).

    Args:
        nsp: bool. Whether the outputs have the next-sentence head's; `False` keeps the
            MLM values only, for a masked LM. Defaults to `True`.
        name: str. The metric's name. Defaults to `"pretraining"`.
        **kwargs: Other arguments of `keras.metrics.Metric`, such as `dtype`.

    Example:

        >>> metrics = PretrainingMetrics()
        >>> targets = {"mlm_labels": np.array([[7, 9]]), "mlm_weights": np.array([[1, 0]]),
        ...            "nsp_labels": np.array([1])}  # the second masked slot is padding
        >>> outputs = {"mlm": np.eye(10)[np.array([[7, 4]])], "nsp": np.array([[0.0, 1.0]])}
        >>> metrics.update_state(targets, outputs)
        >>> float(metrics.result()["mlm_accuracy"]), float(metrics.result()["nsp_accuracy"])
        (1.0, 1.0)
    """

    MLM_NAMES = ("mlm_loss", "mlm_accuracy", "mlm_perplexity")
    NAMES = (*MLM_NAMES, "nsp_loss", "nsp_accuracy")

    def __init__(self, nsp=True, name="pretraining", **kwargs):
        super().__init__(name=name, **kwargs)
        self.nsp = nsp
        self.sums = {
            key: self.add_variable(shape=(), initializer="zeros", name=key)
            for key in (
                "mlm_loss",
                "mlm_correct",
                "mlm_count",
                "nsp_loss",
                "nsp_correct",
                "nsp_count",
            )
        }

    def update_state(self, targets, outputs, sample_weight=None):
        weights = ops.cast(targets["mlm_weights"], "float32")
        labels = ops.cast(targets["mlm_labels"], "int32")
        mlm_logits = outputs["mlm"]
        correct = ops.cast(ops.equal(_predicted_ids(mlm_logits), labels), "float32")
        updates = {
            "mlm_loss": ops.sum(token_negative_log_likelihood(labels, mlm_logits) * weights),
            "mlm_correct": ops.sum(correct * weights),
            "mlm_count": ops.sum(weights),
        }
        if self.nsp:
            nsp_labels = ops.cast(targets["nsp_labels"], "int32")
            nsp_correct = ops.equal(_predicted_ids(outputs["nsp"]), nsp_labels)
            updates.update(
                nsp_loss=ops.sum(classification_losses(nsp_labels, outputs["nsp"])),
                nsp_correct=ops.sum(ops.cast(nsp_correct, "float32")),
                nsp_count=count_rows(nsp_labels),
            )
        for key, value in updates.items():
            self.sums[key].assign_add(value)

    def result(self):
        mlm = lambda key: ops.divide_no_nan(self.sums[key], self.sums["mlm_count"])  # noqa: E731
        nsp = lambda key: ops.divide_no_nan(self.sums[key], self.sums["nsp_count"])  # noqa: E731
        values = {
            "mlm_loss": mlm("mlm_loss"),
            "mlm_accuracy": mlm("mlm_correct"),
            "mlm_perplexity": ops.exp(mlm("mlm_loss")),
        }
        if self.nsp:
            values.update(nsp_loss=nsp("nsp_loss"), nsp_accuracy=nsp("nsp_correct"))
        return values

    def reset_state(self):
        for variable in self.sums.values():
            variable.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "nsp": self.nsp}
