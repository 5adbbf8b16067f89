"""Token-level metrics that ignore padding."""

import keras
from keras import ops

from keras_attn.training.losses import token_cross_entropy


class _MaskedTokenMean(keras.metrics.Metric):
    """Running mean of a per-token value over non-padding targets."""

    def __init__(self, pad_id=0, name=None, **kwargs):
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
    """Fraction of non-padding target tokens whose argmax prediction is right."""

    def __init__(self, pad_id=0, name="token_accuracy", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def token_values(self, targets, logits):
        predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
        return ops.cast(ops.equal(predicted, targets), "float32")

    def result(self):
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedPerplexity(_MaskedTokenMean):
    """exp(mean negative log-likelihood) over non-padding target tokens.

    Computed without label smoothing, so it is a true perplexity.
    """

    def __init__(self, pad_id=0, name="perplexity", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def token_values(self, targets, logits):
        return token_cross_entropy(targets, logits)

    def result(self):
        return ops.exp(ops.divide_no_nan(self.total, self.count))
