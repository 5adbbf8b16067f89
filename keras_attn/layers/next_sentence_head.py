"""BERT's next-sentence-prediction head (Devlin et al. 2019, section 3.1, task #2)."""

import keras

from keras_attn.layers.initializers import bert_initializer


@keras.saving.register_keras_serializable(package="keras_attn")
class NextSentenceHead(keras.layers.Layer):
    """Two-way logits, IsNext (0) or NotNext (1), from the pooled [CLS] state.

    Args:
        kernel_initializer: str or keras.initializers.Initializer. Initializer of the
            projection; None gives BERT's TruncatedNormal(0.02) (`bert_initializer`).
            Defaults to None.

    Call arguments:
        pooled: tensor of shape `(B, d)`. The backbone's pooled output (tanh of a
            dense layer on the [CLS] state).

    Returns:
        A tensor of shape `(B, 2)`: the logits.

    Example:

        >>> NextSentenceHead()(np.random.rand(3, 16).astype("float32")).shape
        TensorShape([3, 2])
    """

    def __init__(self, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.projection = keras.layers.Dense(
            2,
            kernel_initializer=self.kernel_initializer,
            name="projection",
            dtype=self.dtype_policy,
        )

    def build(self, pooled_shape):
        self.projection.build(pooled_shape)

    def call(self, pooled):
        return self.projection(pooled)

    def compute_output_shape(self, pooled_shape):
        return (pooled_shape[0], 2)

    def get_config(self):
        config = super().get_config()
        config["kernel_initializer"] = keras.initializers.serialize(self.kernel_initializer)
        return config
