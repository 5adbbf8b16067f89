"""Input embeddings: tokens plus positions (Transformer), plus segments (BERT)."""

import math

import keras
from keras import ops

from keras_attn.layers.add_and_norm import BERT_LAYER_NORM_EPSILON
from keras_attn.layers.initializers import bert_initializer, clone_initializer
from keras_attn.layers.position import PositionEmbedding, SinusoidalPositionEncoding
from pipelines.special_tokens import PAD_ID

# Position kinds: the sinusoids in either layout of
# `SinusoidalPositionEncoding`, or learned vectors.
SINUSOIDS = {"sinusoidal": "interleaved", "sinusoidal_halves": "halves"}
POSITION_KINDS = (*SINUSOIDS, "learned")


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding plus positional encoding (Vaswani et al. 2017, 3.4-3.5).

    output = Dropout(E[token] · √d + PE[position]). With `reverse=True` the
    layer maps hidden states back to vocabulary logits with the transposed
    token table, the paper's weight sharing between the embedding and the
    pre-softmax projection.

    Args:
        vocabulary_size: int. Number of token ids.
        max_sequence_length: int. The longest sequence accepted.
        hidden_dim: int. The model width d (keras-hub's `TokenAndPositionEmbedding`
            calls it `embedding_dim`; here every model width is `hidden_dim`).
        scale_by_sqrt_dim: bool. Whether to multiply token embeddings by √d, as in
            the paper. Defaults to True.
        mask_zero: bool. Whether token id 0 is padding; the output then carries a
            Keras mask. Defaults to True.
        position: str. One of `"sinusoidal"` (the paper), `"sinusoidal_halves"`
            (the sines, then the cosines: Marian's layout) or `"learned"`.
            Defaults to "sinusoidal".
        dropout: float. Dropout rate on the sum. Defaults to 0.0.
        embeddings_initializer: str or keras.initializers.Initializer. Initializer
            of the token table (and of the learned positions), each its own copy;
            None gives N(0, d^-0.5), so that E · √d has unit variance.
            Defaults to None.

    Call arguments:
        token_ids: int tensor of shape `(B, T)`, or with `reverse=True` hidden
            states of shape `(B, T, d)`.
        start_index: int or scalar int tensor. Position of `token_ids[:, 0]`
            (incremental decoding). Defaults to 0.
        reverse: bool. Whether to return `(B, T, vocabulary_size)` logits from
            hidden states. Defaults to False.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).

    Returns:
        A tensor of shape `(B, T, hidden_dim)`: the embeddings; with `reverse=True`,
        the logits, of shape `(B, T, vocabulary_size)`.

    Raises:
        ValueError: if `position` is not one of the names above; when first called,
            if `token_ids` does not have rank 2; when called, if the positions
            (a length and `start_index` known in Python) exceed
            `max_sequence_length`.

    Example:

        >>> embed = TokenAndPositionEmbedding(100, max_sequence_length=32, hidden_dim=16)
        >>> embed(np.array([[5, 7, 0]])).shape
        TensorShape([1, 3, 16])
    """

    def __init__(
        self,
        vocabulary_size,
        max_sequence_length,
        hidden_dim,
        scale_by_sqrt_dim=True,
        mask_zero=True,
        position="sinusoidal",
        dropout=0.0,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if position not in POSITION_KINDS:
            raise ValueError(f"`position` must be one of {POSITION_KINDS}, got {position!r}.")
        self.vocabulary_size = vocabulary_size
        self.max_sequence_length = max_sequence_length
        self.hidden_dim = hidden_dim
        self.scale_by_sqrt_dim = scale_by_sqrt_dim
        self.mask_zero = mask_zero
        self.position = position
        self.dropout = dropout
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomNormal(stddev=hidden_dim**-0.5)
        )
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=clone_initializer(
                self.embeddings_initializer, "token_embedding"
            ),
            name="token_embedding",
            dtype=self.dtype_policy,
        )
        if position in SINUSOIDS:
            self.position_embedding = SinusoidalPositionEncoding(
                max_sequence_length,
                layout=SINUSOIDS[position],
                name="position_embedding",
                dtype=self.dtype_policy,
            )
        else:
            self.position_embedding = PositionEmbedding(
                max_sequence_length,
                initializer=clone_initializer(self.embeddings_initializer, "position_embedding"),
                name="position_embedding",
                dtype=self.dtype_policy,
            )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.supports_masking = mask_zero

    def build(self, token_ids_shape):
        if len(token_ids_shape) != 2:
            raise ValueError(
                "TokenAndPositionEmbedding: `token_ids` must have rank 2 "
                f"(batch, length), got shape {tuple(token_ids_shape)}."
            )
        self.token_embedding.build(token_ids_shape)
        self.position_embedding.build(tuple(token_ids_shape) + (self.hidden_dim,))

    def call(self, token_ids, start_index=0, reverse=False, training=None):
        if reverse:
            table = ops.cast(self.token_embedding.embeddings, token_ids.dtype)
            return ops.matmul(token_ids, ops.transpose(table))
        x = self.token_embedding(token_ids)
        if self.scale_by_sqrt_dim:
            x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        x = x + self.position_embedding(x, start_index=start_index)
        return self.dropout_layer(x, training=training)

    def compute_mask(self, token_ids, mask=None):
        if not self.mask_zero or "float" in str(token_ids.dtype):
            return None  # no padding ids, or hidden states (`reverse=True`)
        return ops.not_equal(token_ids, PAD_ID)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "max_sequence_length": self.max_sequence_length,
                "hidden_dim": self.hidden_dim,
                "scale_by_sqrt_dim": self.scale_by_sqrt_dim,
                "mask_zero": self.mask_zero,
                "position": self.position,
                "dropout": self.dropout,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn")
class BertEmbedding(keras.layers.Layer):
    """BERT's input representation (Devlin et al. 2019, section 3, figure 2).

    output = Dropout(LayerNorm(E_token + E_segment + E_position)), all three
    learned. Token id 0 is padding and the output carries its Keras mask.

    Args:
        vocabulary_size: int. Number of token ids.
        max_sequence_length: int. Number of learned positions.
        num_segments: int. Number of segment ids (2 for sentence A / B).
        hidden_dim: int. The model width.
        dropout: float. Dropout rate after the LayerNorm. Defaults to 0.0.
        layer_norm_epsilon: float. Epsilon of the LayerNorm. Defaults to 1e-12.
        embeddings_initializer: str or keras.initializers.Initializer. Initializer
            of the three tables, each drawn from its own copy; None gives BERT's
            TruncatedNormal(0.02). Defaults to None.

    Call arguments:
        token_ids: int tensor of shape `(B, T)`.
        segment_ids: int tensor of shape `(B, T)`. The segment ids; zeros when
            omitted. Defaults to None.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).

    Returns:
        A tensor of shape `(B, T, hidden_dim)`.

    Raises:
        ValueError: when called, if `token_ids` does not have rank 2, `segment_ids`
            has another shape, or (a length known in Python) the sequence is longer
            than `max_sequence_length`.

    Example:

        >>> embed = BertEmbedding(100, max_sequence_length=32, num_segments=2, hidden_dim=16)
        >>> embed(np.array([[2, 7, 3]]), np.array([[0, 0, 1]])).shape
        TensorShape([1, 3, 16])
    """

    def __init__(
        self,
        vocabulary_size,
        max_sequence_length,
        num_segments,
        hidden_dim,
        dropout=0.0,
        layer_norm_epsilon=BERT_LAYER_NORM_EPSILON,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.hidden_dim = hidden_dim
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or bert_initializer()
        )
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=self._initializer("token_embedding"),
            name="token_embedding",
            dtype=self.dtype_policy,
        )
        self.segment_embedding = keras.layers.Embedding(
            num_segments,
            hidden_dim,
            embeddings_initializer=self._initializer("segment_embedding"),
            name="segment_embedding",
            dtype=self.dtype_policy,
        )
        self.position_embedding = PositionEmbedding(
            max_sequence_length,
            initializer=self._initializer("position_embedding"),
            name="position_embedding",
            dtype=self.dtype_policy,
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="layer_norm", dtype=self.dtype_policy
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    def _initializer(self, table):
        return clone_initializer(self.embeddings_initializer, table)

    def build(self, token_ids_shape, segment_ids_shape=None):
        if len(token_ids_shape) != 2:
            raise ValueError(
                "BertEmbedding: `token_ids` must have rank 2 (batch, length), "
                f"got shape {tuple(token_ids_shape)}."
            )
        if segment_ids_shape is not None and tuple(segment_ids_shape) != tuple(token_ids_shape):
            raise ValueError(
                "BertEmbedding: `segment_ids` must have the shape of "
                f"`token_ids`, got {tuple(segment_ids_shape)} and "
                f"{tuple(token_ids_shape)}."
            )
        hidden_shape = tuple(token_ids_shape) + (self.hidden_dim,)
        self.token_embedding.build(token_ids_shape)
        self.segment_embedding.build(token_ids_shape)
        self.position_embedding.build(hidden_shape)
        self.layer_norm.build(hidden_shape)

    def call(self, token_ids, segment_ids=None, training=None):
        if segment_ids is None:
            segment_ids = ops.zeros_like(token_ids)
        x = self.token_embedding(token_ids) + self.segment_embedding(segment_ids)
        x = x + self.position_embedding(x)
        return self.dropout_layer(self.layer_norm(x), training=training)

    def compute_mask(self, token_ids, mask=None):
        return ops.not_equal(token_ids, PAD_ID)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "max_sequence_length": self.max_sequence_length,
                "num_segments": self.num_segments,
                "hidden_dim": self.hidden_dim,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
