"""A learned bias on each vocabulary logit, for an output projection that has none of its own."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
class OutputBias(keras.layers.Layer):
    """logits + b, one learned b per vocabulary entry.

    A tied output projection (the transposed token table) has no bias;
    Marian's models add this one (Hugging Face's `final_logits_bias`).

    Args:
        vocabulary_size: int. The logits' last dimension.

    Call arguments:
        logits: tensor of shape `(..., vocabulary_size)`.

    Returns:
        A tensor: the logits plus the bias, of their shape and dtype.

    Raises:
        ValueError: when called on logits whose last dimension is not
            `vocabulary_size`.

    Example:

        >>> bias = OutputBias(3)
        >>> bias(np.zeros((1, 2, 3), "float32")).shape
        TensorShape([1, 2, 3])
    """

    def __init__(self, vocabulary_size, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size

    def build(self, logits_shape):
        if logits_shape[-1] != self.vocabulary_size:
            raise ValueError(
                f"OutputBias: the logits' last dimension {logits_shape[-1]} is not vocabulary_size="
                f"{self.vocabulary_size}."
            )
        self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,), initializer="zeros")

    def call(self, logits):
        return logits + ops.cast(self.bias, logits.dtype)

    def get_config(self):
        return {**super().get_config(), "vocabulary_size": self.vocabulary_size}
