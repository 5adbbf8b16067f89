"""BERT's masked-language-model head (Devlin et al. 2019, section 3.1, task #1)."""

import keras
from keras import ops

from keras_attn.layers.add_and_norm import BERT_LAYER_NORM_EPSILON
from keras_attn.layers.initializers import bert_initializer, clone_initializer


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedLMHead(keras.layers.Layer):
    """Predicts the tokens at masked positions, with the input embedding as output weights.

    logits = LayerNorm(GELU(h W + b)) Eᵀ + b_out. Given a `token_embedding`
    layer, E is its table: the embedding variable itself, not a copy (BERT
    ties them), so the head adds only its transform and the output bias.
    Given `mask_positions`, the hidden states at those positions are
    gathered first and the vocabulary projection, the costly part, runs on
    them only: `(B, P, V)` logits instead of `(B, T, V)`.

    A head rebuilt from its config (`from_config`, loading a `.keras` file)
    owns a copy of the table, with the saved values: build the model again
    from a backbone to tie them.

    Args:
        vocabulary_size: int. The number of tokens.
        token_embedding: keras.layers.Embedding. The embedding whose table is the
            output projection (e.g. `BertEmbedding.token_embedding`); its owner
            keeps it. Without it, the head makes its own table. Defaults to None.
        activation: str or callable. The transform's activation. Defaults to "gelu".
        layer_norm_epsilon: float. Epsilon of the LayerNorm. Defaults to 1e-12.
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            the transform (and of an own table), each its own copy; None gives
            BERT's TruncatedNormal(0.02). Defaults to None.

    Call arguments:
        inputs: tensor of shape `(B, T, d)`. Hidden states of the encoder.
        mask_positions: int tensor of shape `(B, P)`. The positions to predict;
            without them every position is predicted. Defaults to None.

    Returns:
        A tensor of shape `(B, P, V)`: the logits (`(B, T, V)` without
        `mask_positions`).

    Raises:
        ValueError: if `token_embedding` has another number of tokens than
            `vocabulary_size`; when first called, if the hidden states' width
            differs from that of the token embedding table.

    Example:

        >>> embedding = keras.layers.Embedding(100, 16)
        >>> embedding.build((None,))
        >>> head = MaskedLMHead(100, token_embedding=embedding)
        >>> head(np.random.rand(2, 7, 16).astype("float32"), np.array([[1, 3], [0, 6]])).shape
        TensorShape([2, 2, 100])
    """

    def __init__(
        self,
        vocabulary_size,
        token_embedding=None,
        activation="gelu",
        layer_norm_epsilon=BERT_LAYER_NORM_EPSILON,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if token_embedding is not None and token_embedding.input_dim != vocabulary_size:
            raise ValueError(
                f"MaskedLMHead: vocabulary_size is {vocabulary_size} but the token "
                f"embedding has {token_embedding.input_dim} tokens."
            )
        self.vocabulary_size = vocabulary_size
        # A function, not an attribute Keras tracks: the table stays its owner's weight.
        self._tied = (lambda: token_embedding.embeddings) if token_embedding is not None else None
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())

    @property
    def embeddings(self):
        """The `(V, d)` output projection: the tied embedding variable, or the head's own."""
        return self._tied() if self._tied else self._own_embeddings

    def build(self, inputs_shape, mask_positions_shape=None):
        hidden_dim = inputs_shape[-1]
        self.transform = keras.layers.Dense(
            hidden_dim,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer, "transform"),
            name="transform",
            dtype=self.dtype_policy,
        )
        self.transform.build((None, None, hidden_dim))
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="layer_norm", dtype=self.dtype_policy
        )
        self.layer_norm.build((None, None, hidden_dim))
        self.bias = self.add_weight(
            name="output_bias", shape=(self.vocabulary_size,), initializer="zeros"
        )
        if not self._tied:
            self._own_embeddings = self.add_weight(
                name="embeddings",
                shape=(self.vocabulary_size, hidden_dim),
                initializer=clone_initializer(self.kernel_initializer, "embeddings"),
            )
        if tuple(self.embeddings.shape) != (self.vocabulary_size, hidden_dim):
            raise ValueError(
                f"MaskedLMHead: the hidden states have width {hidden_dim} but the "
                f"token embedding table has shape {tuple(self.embeddings.shape)}."
            )

    def call(self, inputs, mask_positions=None):
        x = inputs
        if mask_positions is not None:
            positions = ops.expand_dims(ops.cast(mask_positions, "int32"), -1)  # (B, P, 1)
            x = ops.take_along_axis(x, positions, axis=1)  # (B, P, d)
        x = self.layer_norm(self.transform(x))
        table = ops.cast(self.embeddings, x.dtype)  # (V, d)
        return ops.matmul(x, ops.transpose(table)) + ops.cast(self.bias, x.dtype)

    def compute_output_shape(self, inputs_shape, mask_positions_shape=None):
        length = inputs_shape[1] if mask_positions_shape is None else mask_positions_shape[1]
        return (inputs_shape[0], length, self.vocabulary_size)

    def compute_mask(self, inputs, mask_positions=None, mask=None):
        return None  # the predictions' weights say which are real

    def save_own_variables(self, store):
        # The table too when tied, so that a `.keras` file's head can be rebuilt untied.
        store["0"] = self.bias.numpy()
        store["1"] = keras.ops.convert_to_numpy(self.embeddings)

    def load_own_variables(self, store):
        self.bias.assign(store["0"])
        if not self._tied:
            self._own_embeddings.assign(store["1"])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
