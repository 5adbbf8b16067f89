"""Add & Norm: the residual connection around every Transformer sublayer."""

import keras

# The Transformer blocks' LayerNorm epsilon, and BERT's (a checkpoint may give its own).
LAYER_NORM_EPSILON = 1e-5
BERT_LAYER_NORM_EPSILON = 1e-12


@keras.saving.register_keras_serializable(package="keras_attn")
class AddAndNorm(keras.layers.Layer):
    """Residual connection and layer normalization (Vaswani et al. 2017, 3.1).

    Post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm (`norm_first=True`, Xiong et al. 2020):
    x + Dropout(Sublayer(LayerNorm(x))). A block calls `normalize_input(x)`
    before its sublayer (the identity in post-norm) and the layer itself
    after it.

    Args:
        dropout: float. Dropout rate on the sublayer output (the paper's P_drop).
            Defaults to 0.0.
        norm_first: bool. Pre-norm instead of post-norm. Defaults to False.
        epsilon: float. Epsilon of the LayerNorm. Defaults to 1e-5
            (`LAYER_NORM_EPSILON`).

    Call arguments:
        residual: tensor of shape `(B, T, d)`. The sublayer's input before any norm.
        sublayer_output: tensor of shape `(B, T, d)`. The sublayer's output.
        training: bool. Whether dropout is active. Defaults to None (inference, unless
            an outer call trains).

    Returns:
        A tensor of shape `(B, T, d)`.

    Example:

        >>> add_norm = AddAndNorm(dropout=0.1)
        >>> x = np.random.rand(2, 5, 8).astype("float32")
        >>> add_norm(x, add_norm.normalize_input(x) * 2).shape
        TensorShape([2, 5, 8])
    """

    def __init__(self, dropout=0.0, norm_first=False, epsilon=LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.norm_first = norm_first
        self.epsilon = epsilon
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=epsilon, name="layer_norm", dtype=self.dtype_policy
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    def build(self, residual_shape, sublayer_output_shape=None):
        self.layer_norm.build(residual_shape)

    def normalize_input(self, x):
        """The sublayer's input: LayerNorm(x) in pre-norm, `x` itself in post-norm.

        Args:
            x: tensor of shape `(B, T, d)`. The residual.

        Returns:
            A tensor of shape `(B, T, d)`.
        """
        return self.layer_norm(x) if self.norm_first else x

    def call(self, residual, sublayer_output, training=None):
        x = residual + self.dropout_layer(sublayer_output, training=training)
        return x if self.norm_first else self.layer_norm(x)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "dropout": self.dropout,
                "norm_first": self.norm_first,
                "epsilon": self.epsilon,
            }
        )
        return config
