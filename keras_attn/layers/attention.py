"""Alignment attention for RNN encoder-decoders: Bahdanau (2015) and Luong (2015).

Both layers compute, for every query (a decoder state), a distribution α over
the keys (encoder states) and return the context Σ α · value.
"""

import math

import keras
from keras import ops

from keras_attn.layers import masking

LUONG_SCORES = ("dot", "scaled_dot", "general", "scaled_general", "concat", "cosine")
LOCAL_ALIGNMENTS = ("monotonic", "predictive")


class _AlignmentAttention(keras.layers.Layer):
    """Shared call of the alignment-attention layers.

    Subclasses define `build_score(query_dim, key_dim)` and
    `score(query, projected_key)` → `(B, Tq, Tk)` logits, may override
    `project_key(key)` (the part of the score that depends on the key
    alone, computed once per source rather than once per decoder step) and
    `local_window` to restrict and reweight the keys a query sees.
    """

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        self.dropout = dropout
        self.dropout_layer = (
            keras.layers.Dropout(dropout, dtype=self.dtype_policy) if dropout else None
        )
        self.supports_masking = True

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        name = type(self).__name__
        if len(query_shape) not in (2, 3):
            raise ValueError(
                f"{name}: `query` must have rank 2 (batch, features) or 3 "
                f"(batch, length, features), got shape {tuple(query_shape)}."
            )
        for arg, shape in (("value", value_shape), ("key", key_shape)):
            if len(shape) != 3:
                raise ValueError(
                    f"{name}: `{arg}` must have rank 3 (batch, length, "
                    f"features), got shape {tuple(shape)}."
                )
        if key_shape[1] and value_shape[1] and key_shape[1] != value_shape[1]:
            raise ValueError(
                f"{name}: `key` and `value` must have the same length, got "
                f"key {tuple(key_shape)} and value {tuple(value_shape)}."
            )
        self.build_score(query_shape[-1], key_shape[-1])

    def call(
        self,
        query,
        value,
        key=None,
        value_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        key_mask=None,
        query_position=None,
        projected_key=None,
    ):
        key = value if key is None else key
        single_step = len(query.shape) == 2
        if single_step:  # one decoder step: (B, d) → (B, 1, d)
            query = ops.expand_dims(query, 1)
            query_mask = None
        key_mask = value_mask if key_mask is None else key_mask
        start = 0 if query_position is None else query_position

        if projected_key is None:
            projected_key = self.project_key(key)
        scores = self.score(query, projected_key)  # (B, Tq, Tk)
        causal = None
        if use_causal_mask:
            causal = masking.causal_mask(ops.shape(query)[1], ops.shape(key)[1], query_start=start)
        window, reweight = self.local_window(query, key, key_mask, start)
        # Padded queries attend to nothing: their weights and outputs are zeros.
        mask = masking.merge_masks(masking.attention_mask(query_mask, key_mask, causal), window)
        weights = masking.masked_softmax(scores, mask)
        if reweight is not None:
            weights = weights * ops.cast(reweight, weights.dtype)
        dropped = weights
        if self.dropout_layer is not None:
            dropped = self.dropout_layer(weights, training=training)
        output = ops.matmul(dropped, value)  # Σ_s α(t, s) · value_s
        if single_step:
            output, weights = output[:, 0], weights[:, 0]
        if return_attention_scores:
            return output, weights
        return output

    def project_key(self, key):
        """What the score needs of the keys: here the keys themselves.

        A decoder calls it once per source and passes the result to every
        step as `projected_key`.

        Args:
            key: tensor of shape `(B, Tk, dk)`.

        Returns:
            A tensor: `key` itself.
        """
        return key

    def local_window(self, query, key, key_mask, start):
        """The window of local attention: `(None, None)` here (global attention).

        Args:
            query: tensor of shape `(B, Tq, dq)`.
            key: tensor of shape `(B, Tk, dk)`.
            key_mask: bool tensor of shape `(B, Tk)`, or None.
            start: int or scalar int tensor. Position of the first query.

        Returns:
            tuple. `(mask, reweight)`: the keys each query may see and the factors
            its weights are multiplied by, each None or broadcastable to
            `(B, Tq, Tk)`.
        """
        return None, None


@keras.saving.register_keras_serializable(package="keras_attn")
class AdditiveAttention(_AlignmentAttention):
    """Additive attention with learned weights (Bahdanau et al. 2015).

    score(q, k) = vᵀ tanh(W_q q + W_k k), α = softmax over the keys, and the
    output is the context vector Σ α · value. Unlike
    `keras.layers.AdditiveAttention`, W_q, W_k and v are learned.

    Args:
        units: int. Size of the hidden alignment layer (the length of v); positive.
        use_bias: bool. Whether W_q q has a bias. Defaults to True.
        dropout: float. Dropout rate on the attention weights, in [0, 1).
            Defaults to 0.0.

    Call arguments:
        query: tensor of shape `(B, dq)` for one decoder step, or `(B, Tq, dq)`.
        value: tensor of shape `(B, Tk, dv)`. The encoder outputs.
        key: tensor of shape `(B, Tk, dk)`. The keys; `value` when not given.
            Defaults to None.
        value_mask: bool tensor of shape `(B, Tk)`. `True` for real keys. Filled by
            Keras from `value`'s mask. Defaults to None.
        use_causal_mask: bool. Whether query `i` may only attend to keys `<= i`.
            Defaults to False.
        return_attention_scores: bool. Whether to also return the weights.
            Defaults to False.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).
        query_mask: bool tensor of shape `(B, Tq)`. `True` for real queries (padded
            ones get zero weights); filled by Keras from `query`'s mask. Ignored
            for a rank-2 query. Defaults to None.
        key_mask: bool tensor of shape `(B, Tk)`. `True` for real keys; `value_mask`
            when not given. Defaults to None.
        query_position: int or scalar int tensor. Position of the first query
            (causal masks), e.g. the decoder step of a rank-2 query; 0 when not
            given. Defaults to None.
        projected_key: tensor of shape `(B, Tk, units)`. `project_key(key)`, W_k k,
            computed once for all the steps of a decoder; computed from `key` when
            not given. Defaults to None.

    Returns:
        The context, a tensor of shape `(B, dv)` or `(B, Tq, dv)`; with
        `return_attention_scores`, the tuple `(context, weights)`, the weights of
        shape `(B, Tk)` or `(B, Tq, Tk)`.

    Raises:
        ValueError: if `units` is not a positive integer or `dropout` is not in
            [0, 1); when called, if `query` does not have rank 2 or 3, `key` or
            `value` does not have rank 3, or `key` and `value` differ in length.

    Example:

        >>> attention = AdditiveAttention(units=16)
        >>> state = np.random.rand(2, 8).astype("float32")         # decoder step
        >>> encoded = np.random.rand(2, 5, 12).astype("float32")   # encoder outputs
        >>> context, weights = attention(state, encoded, return_attention_scores=True)
        >>> context.shape, weights.shape
        (TensorShape([2, 12]), TensorShape([2, 5]))
    """

    def __init__(self, units, use_bias=True, dropout=0.0, **kwargs):
        super().__init__(dropout=dropout, **kwargs)
        if not isinstance(units, int) or units < 1:
            raise ValueError(f"`units` must be a positive integer, got {units!r}.")
        self.units = units
        self.use_bias = use_bias

    def build_score(self, query_dim, key_dim):
        """Makes W_q, W_k and v.

        Args:
            query_dim: int. The query's feature size `dq`.
            key_dim: int. The key's feature size `dk`.
        """
        self.query_projection = keras.layers.Dense(
            self.units,
            use_bias=self.use_bias,
            name="query_projection",
            dtype=self.dtype_policy,
        )
        self.key_projection = keras.layers.Dense(
            self.units, use_bias=False, name="key_projection", dtype=self.dtype_policy
        )
        self.query_projection.build((None, query_dim))
        self.key_projection.build((None, key_dim))
        self.v = self.add_weight(name="v", shape=(self.units,), initializer="glorot_uniform")

    def project_key(self, key):
        """W_k k, the part of the score that depends on the keys alone.

        Args:
            key: tensor of shape `(B, Tk, dk)`.

        Returns:
            A tensor of shape `(B, Tk, units)`.
        """
        return self.key_projection(key)

    def score(self, query, projected_key):
        """vᵀ tanh(W_q q + W_k k) for every (query, key) pair.

        Args:
            query: tensor of shape `(B, Tq, dq)`.
            projected_key: tensor of shape `(B, Tk, units)`. W_k k, from `project_key`.

        Returns:
            A tensor of shape `(B, Tq, Tk)`: the logits.
        """
        return additive_score(_dense(self.query_projection, query), projected_key, self.v)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "use_bias": self.use_bias, "dropout": self.dropout})
        return config


def additive_score(projected_query, projected_key, v):
    """vᵀ tanh(q' + k') for every (query, key) pair.

    Args:
        projected_query: tensor of shape `(B, Tq, units)`. q' = W_q q.
        projected_key: tensor of shape `(B, Tk, units)`. k' = W_k k.
        v: tensor of shape `(units,)`.

    Returns:
        A tensor of shape `(B, Tq, Tk)`: the logits.
    """
    # (B, Tq, Tk, units)
    hidden = ops.tanh(ops.expand_dims(projected_query, 2) + ops.expand_dims(projected_key, 1))
    return ops.einsum("bqku,u->bqk", hidden, ops.cast(v, hidden.dtype))


@keras.saving.register_keras_serializable(package="keras_attn")
class DotProductAttention(_AlignmentAttention):
    """Multiplicative attention of Luong et al. (2015), global or local.

    Scores (section 3.1):
    - `"dot"`: qᵀk
    - `"scaled_dot"`: qᵀk / √d (Vaswani et al. 2017)
    - `"general"`: qᵀ W k
    - `"scaled_general"`: qᵀ W k / √d, d the key size (the general score with
      the Transformer's scaling: large keys do not saturate the softmax early)
    - `"concat"`: vᵀ tanh(W [q; k])
    - `"cosine"`: qᵀk / (|q| |k|)

    With `window=D`, attention is local (section 3.2): each query attends
    to the keys in [p - D, p + D] only. With `alignment="monotonic"`
    (local-m) p is the query's own position (at most S, the index of the
    last real key, so that a target longer than its source still sees the
    source's end); with `"predictive"` (local-p)
    p = S · sigmoid(v_pᵀ tanh(W_p q)) is predicted from the query (S the
    index of the last real key) and the weights are multiplied by a
    Gaussian exp(-(s - p)² / (2σ²)) with σ = D / 2 (at least 0.5).

    Args:
        score: str. One of `"dot"`, `"scaled_dot"`, `"general"`,
            `"scaled_general"`, `"concat"`, `"cosine"`. Defaults to "dot".
        units: int. Hidden size of `"concat"` and of the local-p position network;
            the query's feature size when not given. Defaults to None.
        window: int. The half-width D of local attention, >= 0; None for global
            attention. Defaults to None.
        alignment: str. One of `"monotonic"` (local-m) or `"predictive"`
            (local-p); used with `window`. Defaults to "monotonic".
        dropout: float. Dropout rate on the attention weights, in [0, 1).
            Defaults to 0.0.

    Call arguments:
        query: tensor of shape `(B, dq)` for one decoder step, or `(B, Tq, dq)`.
        value: tensor of shape `(B, Tk, dv)`. The encoder outputs.
        key: tensor of shape `(B, Tk, dk)`. The keys; `value` when not given.
            Defaults to None.
        value_mask: bool tensor of shape `(B, Tk)`. `True` for real keys. Filled by
            Keras from `value`'s mask. Defaults to None.
        use_causal_mask: bool. Whether query `i` may only attend to keys `<= i`.
            Defaults to False.
        return_attention_scores: bool. Whether to also return the weights.
            Defaults to False.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).
        query_mask: bool tensor of shape `(B, Tq)`. `True` for real queries (padded
            ones get zero weights); filled by Keras from `query`'s mask. Ignored
            for a rank-2 query. Defaults to None.
        key_mask: bool tensor of shape `(B, Tk)`. `True` for real keys; `value_mask`
            when not given. Defaults to None.
        query_position: int or scalar int tensor. Position of the first query
            (local-m and causal masks), e.g. the decoder step of a rank-2 query; 0
            when not given. Defaults to None.
        projected_key: tensor. `project_key(key)` (W_k k for `"concat"`, the unit
            keys for `"cosine"`), computed once for all the steps of a decoder;
            computed from `key` when not given. Defaults to None.

    Returns:
        The context, a tensor of shape `(B, dv)` or `(B, Tq, dv)`; with
        `return_attention_scores`, the tuple `(context, weights)`, the weights of
        shape `(B, Tk)` or `(B, Tq, Tk)`.

    Raises:
        ValueError: if `score` or `alignment` is not one of the names above,
            `window` is neither None nor an integer >= 0, or `dropout` is not in
            [0, 1); when called, if `query` does not have rank 2 or 3, `key` or
            `value` does not have rank 3, `key` and `value` differ in length, or
            (`"dot"`, `"scaled_dot"`, `"cosine"`) the query and key feature sizes
            differ.

    Example:

        >>> attention = DotProductAttention(score="general")
        >>> state = np.random.rand(2, 8).astype("float32")
        >>> encoded = np.random.rand(2, 5, 8).astype("float32")
        >>> attention(state, encoded).shape
        TensorShape([2, 8])
    """

    def __init__(
        self,
        score="dot",
        units=None,
        window=None,
        alignment="monotonic",
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(dropout=dropout, **kwargs)
        if score not in LUONG_SCORES:
            raise ValueError(f"`score` must be one of {LUONG_SCORES}, got {score!r}.")
        if alignment not in LOCAL_ALIGNMENTS:
            raise ValueError(f"`alignment` must be one of {LOCAL_ALIGNMENTS}, got {alignment!r}.")
        if window is not None and (not isinstance(window, int) or window < 0):
            raise ValueError(f"`window` must be None or an integer >= 0, got {window!r}.")
        self.score_mode = score
        self.units = units
        self.window = window
        self.alignment = alignment

    def build_score(self, query_dim, key_dim):
        """Makes the weights of the score and of the local-p position network.

        Args:
            query_dim: int. The query's feature size `dq`.
            key_dim: int. The key's feature size `dk`.

        Raises:
            ValueError: for `"dot"`, `"scaled_dot"` and `"cosine"`, if `query_dim`
                and `key_dim` differ.
        """
        if self.score_mode in ("dot", "scaled_dot", "cosine") and query_dim != key_dim:
            raise ValueError(
                f"DotProductAttention(score={self.score_mode!r}) needs query "
                f"and key of the same feature size, got query {query_dim} and "
                f"key {key_dim}; use score='general' or 'concat' otherwise."
            )
        units = self.units or query_dim
        if self.score_mode in ("general", "scaled_general"):
            self.kernel = self.add_weight(
                name="kernel", shape=(query_dim, key_dim), initializer="glorot_uniform"
            )
        if self.score_mode == "concat":
            # W [q; k] = W_q q + W_k k, with W = [W_q, W_k].
            self.query_projection = keras.layers.Dense(
                units, name="query_projection", dtype=self.dtype_policy
            )
            self.key_projection = keras.layers.Dense(
                units, use_bias=False, name="key_projection", dtype=self.dtype_policy
            )
            self.query_projection.build((None, query_dim))
            self.key_projection.build((None, key_dim))
            self.v = self.add_weight(name="v", shape=(units,), initializer="glorot_uniform")
        if self.window is not None and self.alignment == "predictive":
            # In float32: under bfloat16, S · sigmoid(...) would move in steps of S / 256.
            self.position_hidden = keras.layers.Dense(
                units, activation="tanh", name="position_hidden", dtype="float32"
            )
            self.position_output = keras.layers.Dense(
                1, activation="sigmoid", use_bias=False, name="position_output", dtype="float32"
            )
            self.position_hidden.build((None, query_dim))
            self.position_output.build((None, units))

    def project_key(self, key):
        """The part of the score that depends on the keys alone.

        Args:
            key: tensor of shape `(B, Tk, dk)`.

        Returns:
            A tensor: W_k k `(B, Tk, units)` for `"concat"`, the unit keys for
            `"cosine"`, the keys themselves otherwise.
        """
        if self.score_mode == "concat":
            return self.key_projection(key)
        if self.score_mode == "cosine":
            return _l2_normalize(key)
        return key

    def score(self, query, projected_key):
        """The score of every (query, key) pair (see the class description).

        Args:
            query: tensor of shape `(B, Tq, dq)`.
            projected_key: tensor. The keys from `project_key`.

        Returns:
            A tensor of shape `(B, Tq, Tk)`: the logits.
        """
        mode = self.score_mode
        if mode == "concat":
            return additive_score(_dense(self.query_projection, query), projected_key, self.v)
        if mode in ("general", "scaled_general"):
            query = ops.matmul(query, self.kernel)
        elif mode == "cosine":
            query = _l2_normalize(query)
        scores = ops.matmul(query, ops.swapaxes(projected_key, -1, -2))
        if mode in ("scaled_dot", "scaled_general"):
            scores = scores / math.sqrt(query.shape[-1])
        return scores

    def local_window(self, query, key, key_mask, start):
        """The window of local attention around each query's aligned position p.

        Args:
            query: tensor of shape `(B, Tq, dq)`.
            key: tensor of shape `(B, Tk, dk)`.
            key_mask: bool tensor of shape `(B, Tk)`, or None. `True` for real keys.
            start: int or scalar int tensor. Position of the first query.

        Returns:
            tuple. `(mask, reweight)`: the keys in [p - D, p + D], broadcastable to
            `(B, Tq, Tk)`, and with local-p the Gaussian factors of the weights
            (None otherwise); `(None, None)` for global attention.
        """
        if self.window is None:
            return None, None
        # Positions in float32: bfloat16 counts exactly only up to 256.
        key_positions = ops.cast(ops.arange(ops.shape(key)[1]), "float32")
        if key_mask is None:
            last = ops.cast(ops.shape(key)[1] - 1, "float32")
        else:
            last = ops.sum(ops.cast(key_mask, "float32"), axis=-1) - 1
        last = ops.reshape(ops.maximum(last, 0), (-1, 1, 1))  # S, the last real key
        if self.alignment == "monotonic":  # local-m: p_t = t, kept inside the source
            centres = ops.arange(ops.shape(query)[1]) + start
            centres = ops.minimum(ops.cast(centres, "float32")[None, :, None], last)
        else:  # local-p: p_t = S · sigmoid(v_pᵀ tanh(W_p h_t))
            centres = last * _dense(self.position_output, _dense(self.position_hidden, query))
        distance = key_positions[None, None, :] - centres  # (B, Tq, Tk)
        mask = ops.less_equal(ops.abs(distance), self.window)
        if self.alignment == "monotonic":
            return mask, None
        sigma = max(self.window / 2.0, 0.5)
        return mask, ops.exp(-ops.square(distance) / (2.0 * sigma**2))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "score": self.score_mode,
                "units": self.units,
                "window": self.window,
                "alignment": self.alignment,
                "dropout": self.dropout,
            }
        )
        return config


def _dense(layer, x):
    """`layer(x)` for `x` `(B, T, d)`, computed on `(B·T, d)`.

    The same values; a plain matmul whose gradient XLA can compile inside a
    decoder's time loop (Dense on rank 3 is a tensordot with a transpose
    computed at run time).
    """
    shape = ops.shape(x)
    flat = layer(ops.reshape(x, (-1, shape[-1])))
    return ops.reshape(flat, (*shape[:-1], layer.units))


def _l2_normalize(x):
    # In float32: 1e-12 is 0 in float16, and 0 / 0 gives NaN gradients for zero (padding) keys.
    x32 = ops.cast(x, "float32")
    normalized = x32 / ops.sqrt(ops.maximum(ops.sum(ops.square(x32), -1, keepdims=True), 1e-12))
    return ops.cast(normalized, x.dtype)
