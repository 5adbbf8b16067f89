"""The position-wise feed-forward network of the Transformer."""

import keras

from keras_attn.layers.initializers import kernel_initializer_argument


@keras.saving.register_keras_serializable(package="keras_attn")
class FeedForward(keras.layers.Layer):
    """FFN(x) = activation(x W1 + b1) W2 + b2 (Vaswani et al. 2017, 3.3).

    Applied to every position separately and identically.

    Args:
        intermediate_dim: int. The inner width d_ff (2048 in the base model).
        activation: str or callable. The inner activation, `"relu"` in the paper.
            Defaults to "relu".
        dropout: float. Dropout rate on the inner activations. Defaults to 0.0.
        kernel_initializer: str or keras.initializers.Initializer. Initializer of W1 and
            W2 (each draws its own copy); None leaves Keras's Dense default (Glorot
            uniform). Defaults to None.

    Call arguments:
        x: tensor of shape `(B, T, d)`.
        training: bool. Whether dropout is active. Defaults to None (inference, unless
            an outer call trains).

    Returns:
        A tensor of shape `(B, T, d)`.

    Example:

        >>> FeedForward(32)(np.random.rand(2, 5, 8).astype("float32")).shape
        TensorShape([2, 5, 8])
    """

    def __init__(
        self, intermediate_dim, activation="relu", dropout=0.0, kernel_initializer=None, **kwargs
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.kernel_initializer = (
            keras.initializers.get(kernel_initializer) if kernel_initializer else None
        )
        self.inner = keras.layers.Dense(
            intermediate_dim,
            activation=self.activation,
            name="inner",
            **kernel_initializer_argument(self.kernel_initializer, "inner"),
            dtype=self.dtype_policy,
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    def build(self, x_shape):
        self.inner.build(x_shape)
        self.outer = keras.layers.Dense(
            x_shape[-1],
            name="outer",
            **kernel_initializer_argument(self.kernel_initializer, "outer"),
            dtype=self.dtype_policy,
        )
        self.outer.build(tuple(x_shape[:-1]) + (self.intermediate_dim,))

    def call(self, x, training=None):
        hidden = self.dropout_layer(self.inner(x), training=training)
        return self.outer(hidden)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "kernel_initializer": self.kernel_initializer
                and keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
