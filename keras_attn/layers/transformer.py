"""The Transformer's encoder and decoder blocks (Vaswani et al. 2017, 3.1)."""

import keras
from keras import ops

from keras_attn.layers import masking
from keras_attn.layers.add_and_norm import LAYER_NORM_EPSILON, AddAndNorm
from keras_attn.layers.feed_forward import FeedForward
from keras_attn.layers.initializers import kernel_initializer_argument
from keras_attn.layers.multi_head_attention import MultiHeadAttention


class _TransformerBlock(keras.layers.Layer):
    """Configuration and sublayer factory shared by both blocks."""

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        activation="relu",
        norm_first=False,
        attention_dropout=0.0,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kernel_initializer = (
            keras.initializers.get(kernel_initializer) if kernel_initializer else None
        )
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = activation
        self.norm_first = norm_first
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    def _check_width(self, x_shape):
        name = type(self).__name__
        if len(x_shape) != 3:
            raise ValueError(
                f"{name}: `x` must have rank 3 (batch, length, features), got "
                f"shape {tuple(x_shape)}."
            )
        width = x_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"{name}: num_heads={self.num_heads} does not divide the "
                f"feature size {width} of `x` (shape {tuple(x_shape)})."
            )
        return width

    def _attention(self, width, name):
        return MultiHeadAttention(
            self.num_heads,
            width // self.num_heads,
            dropout=self.attention_dropout,
            **kernel_initializer_argument(self.kernel_initializer, name),
            name=name,
            dtype=self.dtype_policy,
        )

    def _add_and_norm(self, name):
        return AddAndNorm(
            self.dropout,
            self.norm_first,
            self.layer_norm_epsilon,
            name=name,
            dtype=self.dtype_policy,
        )

    def _feed_forward(self):
        return FeedForward(
            self.intermediate_dim,
            self.activation,
            name="feed_forward",
            **kernel_initializer_argument(self.kernel_initializer, "feed_forward"),
            dtype=self.dtype_policy,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "attention_dropout": self.attention_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": self.kernel_initializer
                and keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoderBlock(_TransformerBlock):
    """One encoder layer: self-attention and a feed-forward network.

    x = AddAndNorm(x, MultiHeadAttention(x, x))
    x = AddAndNorm(x, FeedForward(x))

    Args:
        num_heads: int. Number of attention heads; must divide the width of `x`.
        intermediate_dim: int. Inner width of the feed-forward network.
        dropout: float. Residual dropout rate (P_drop). Defaults to 0.0.
        activation: str or callable. The feed-forward activation. Defaults to "relu".
        norm_first: bool. Pre-norm instead of the paper's post-norm.
            Defaults to False.
        attention_dropout: float. Dropout rate on the attention weights.
            Defaults to 0.0.
        layer_norm_epsilon: float. Epsilon of the LayerNorms. Defaults to 1e-5
            (`LAYER_NORM_EPSILON`).
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            every projection kernel (each draws its own copy); None leaves the
            sublayers' Glorot uniform. BERT uses `TruncatedNormal(stddev=0.02)`.
            Defaults to None.

    Call arguments:
        x: tensor of shape `(B, T, d)`.
        padding_mask: bool tensor of shape `(B, T)`. `True` for real tokens; the
            Keras mask of `x` when not given. Defaults to None.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).
        return_attention_scores: bool. Whether to also return the `(B, h, T, T)`
            weights. Defaults to False.
        mask: bool tensor of shape `(B, T)`. Filled by Keras from `x`'s mask; used
            when `padding_mask` is not given. Defaults to None.

    Returns:
        A tensor of shape `(B, T, d)`; with `return_attention_scores`, the tuple
        of it and the attention weights, of shape `(B, h, T, T)`.

    Raises:
        ValueError: when first called, if `x` does not have rank 3 or `num_heads`
            does not divide its width.

    Example:

        >>> block = TransformerEncoderBlock(num_heads=2, intermediate_dim=32)
        >>> block(np.random.rand(2, 5, 8).astype("float32")).shape
        TensorShape([2, 5, 8])
    """

    def build(self, x_shape):
        width = self._check_width(x_shape)
        self.self_attention = self._attention(width, "self_attention")
        self.self_attention.build(x_shape, x_shape)
        self.self_attention_norm = self._add_and_norm("self_attention_norm")
        self.self_attention_norm.build(x_shape)
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(x_shape)
        self.feed_forward_norm = self._add_and_norm("feed_forward_norm")
        self.feed_forward_norm.build(x_shape)

    def call(
        self,
        x,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
        mask=None,
    ):
        padding_mask = mask if padding_mask is None else padding_mask

        residual = x
        x = self.self_attention_norm.normalize_input(x)
        # Padding as (B, T) masks, not a (B, T, T) one: the memory-efficient
        # path of long sequences never builds anything quadratic.
        attended = self.self_attention(
            x,
            x,
            query_mask=padding_mask,
            value_mask=padding_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        x, scores = attended if return_attention_scores else (attended, None)
        x = self.self_attention_norm(residual, x, training=training)

        residual = x
        x = self.feed_forward(self.feed_forward_norm.normalize_input(x))
        x = self.feed_forward_norm(residual, x, training=training)
        return (x, scores) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoderBlock(_TransformerBlock):
    """One decoder layer: masked self-attention, cross-attention, feed-forward.

    x = AddAndNorm(x, MultiHeadAttention(x, x, causal))
    x = AddAndNorm(x, MultiHeadAttention(x, encoder_outputs))  # if given
    x = AddAndNorm(x, FeedForward(x))

    The causal mask stops position i from attending to positions after i,
    so predictions for i depend only on the known outputs before it
    (section 3.2.3). Without `encoder_outputs` at build time the block has
    no cross-attention (a decoder-only language model).

    Incremental decoding: pass the self-attention `cache` (from
    `empty_cache`) and the step's `cache_index` with `x` holding the new
    step(s) only; pass the encoder's keys and values once projected
    (`cross_attention.project_key_value(encoder_outputs)`) as
    `cross_attention_cache`. Both are dicts of head-major tensors
    `{"key": (B, h, L, d/h), "value": (B, h, L, d/h)}`, with `L` the steps
    so far or the source length `S`. The output equals the full causal
    pass.

    Beam search: `x` may hold `W` consecutive rows per row of
    `cross_attention_cache` and `encoder_padding_mask` (the hypotheses of
    one source, `B · W` rows in all), so the encoder side is kept once per
    source instead of once per hypothesis.

    Args:
        num_heads: int. Number of attention heads; must divide the width of `x`.
        intermediate_dim: int. Inner width of the feed-forward network.
        dropout: float. Residual dropout rate (P_drop). Defaults to 0.0.
        activation: str or callable. The feed-forward activation. Defaults to "relu".
        norm_first: bool. Pre-norm instead of the paper's post-norm.
            Defaults to False.
        attention_dropout: float. Dropout rate on the attention weights.
            Defaults to 0.0.
        layer_norm_epsilon: float. Epsilon of the LayerNorms. Defaults to 1e-5
            (`LAYER_NORM_EPSILON`).
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            every projection kernel (each draws its own copy); None leaves the
            sublayers' Glorot uniform. BERT uses `TruncatedNormal(stddev=0.02)`.
            Defaults to None.

    Call arguments:
        x: tensor of shape `(B, T, d)`. The decoder inputs (embedded, shifted
            right).
        encoder_outputs: tensor of shape `(B, S, d_enc)`. Without it (and without
            `cross_attention_cache`) the call has no cross-attention.
            Defaults to None.
        decoder_padding_mask: bool tensor of shape `(B, T)`. `True` for real
            tokens; ignored with a `cache`. Defaults to None.
        encoder_padding_mask: bool tensor of shape `(B, S)`. `True` for real
            tokens. Defaults to None.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).
        cache: dict. The self-attention cache `{"key": (B, h, L, d/h),
            "value": (B, h, L, d/h)}` of the `L` steps so far, from
            `empty_cache` then from the previous call. Defaults to None.
        cache_index: int or scalar int tensor. The step index of `x[:, 0]` (the
            `L` steps the cache holds). Defaults to None.
        preallocated: bool. Whether the cache has its final length
            (`empty_cache(..., length=)`) and the new steps are written into it.
            Defaults to False.
        cross_attention_cache: dict. Projected encoder keys and values
            `{"key": (B, h, S, d/h), "value": (B, h, S, d/h)}`, from
            `cross_attention.project_key_value`; replaces `encoder_outputs`.
            It may have `B / W` rows, one per `W` rows of `x` (see above).
            Defaults to None.
        return_attention_scores: bool. Whether to also return the weights.
            Defaults to False.
        mask: bool tensor of shape `(B, T)`. Filled by Keras from `x`'s mask; the
            decoder padding mask when neither `decoder_padding_mask` nor `x_mask`
            is given. Defaults to None.
        x_mask: bool tensor of shape `(B, T)`. Filled by Keras from `x`'s mask;
            the decoder padding mask when `decoder_padding_mask` is not given.
            Defaults to None.
        encoder_outputs_mask: bool tensor of shape `(B, S)`. Filled by Keras from
            `encoder_outputs`' mask; the encoder padding mask when
            `encoder_padding_mask` is not given. Defaults to None.

    Returns:
        `x`, a tensor of shape `(B, T, d)`; then the updated cache if `cache` was
        given; then, when asked, the self-attention weights `(B, h, T, T)` and
        the cross-attention weights `(B, h, T, S)` (if there is cross-attention).

    Raises:
        ValueError: when first called, if `x` or `encoder_outputs` does not have
            rank 3 or `num_heads` does not divide the width of `x`; when called,
            if `encoder_outputs` or `cross_attention_cache` is given to a block
            built without cross-attention, or `preallocated=True` comes without
            both `cache` and `cache_index`.

    Example:

        >>> block = TransformerDecoderBlock(num_heads=2, intermediate_dim=32)
        >>> x = np.random.rand(2, 5, 8).astype("float32")
        >>> encoded = np.random.rand(2, 7, 8).astype("float32")
        >>> out, self_w, cross_w = block(x, encoded, return_attention_scores=True)
        >>> out.shape, self_w.shape, cross_w.shape
        (TensorShape([2, 5, 8]), TensorShape([2, 2, 5, 5]), TensorShape([2, 2, 5, 7]))
    """

    def build(self, x_shape, encoder_outputs_shape=None):
        width = self._check_width(x_shape)
        self.self_attention = self._attention(width, "self_attention")
        self.self_attention.build(x_shape, x_shape)
        self.self_attention_norm = self._add_and_norm("self_attention_norm")
        self.self_attention_norm.build(x_shape)
        self.has_cross_attention = encoder_outputs_shape is not None
        if self.has_cross_attention:
            if len(encoder_outputs_shape) != 3:
                raise ValueError(
                    "TransformerDecoderBlock: `encoder_outputs` must have rank 3 "
                    "(batch, length, features), got shape "
                    f"{tuple(encoder_outputs_shape)}."
                )
            self.cross_attention = self._attention(width, "cross_attention")
            self.cross_attention.build(x_shape, encoder_outputs_shape)
            self.cross_attention_norm = self._add_and_norm("cross_attention_norm")
            self.cross_attention_norm.build(x_shape)
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(x_shape)
        self.feed_forward_norm = self._add_and_norm("feed_forward_norm")
        self.feed_forward_norm.build(x_shape)

    def empty_cache(self, batch_size, dtype=None, length=None):
        """A self-attention `cache` that holds no step yet.

        Args:
            batch_size: int or scalar int tensor. `B`.
            dtype: str. The cache's dtype; the block's compute dtype when not
                given. Defaults to None.
            length: int. The steps the cache will hold (to be written with
                `preallocated=True`); None for a cache that grows by each step.
                Defaults to None.

        Returns:
            dict. `{"key": (B, h, L, d/h), "value": (B, h, L, d/h)}` in `dtype`,
            `L` = `length` or 0.
        """
        return self.self_attention.empty_cache(
            batch_size, dtype or self.compute_dtype, length=length
        )

    def call(
        self,
        x,
        encoder_outputs=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        training=None,
        cache=None,
        cache_index=None,
        preallocated=False,
        cross_attention_cache=None,
        return_attention_scores=False,
        mask=None,
        x_mask=None,
        encoder_outputs_mask=None,
    ):
        if decoder_padding_mask is None:
            decoder_padding_mask = mask if x_mask is None else x_mask
        if encoder_padding_mask is None:
            encoder_padding_mask = encoder_outputs_mask
        if cache is not None:
            decoder_padding_mask = None  # decoding steps are never padding
        has_encoder = encoder_outputs is not None or cross_attention_cache is not None
        if has_encoder and not self.has_cross_attention:
            raise ValueError(
                "TransformerDecoderBlock: `encoder_outputs` given to a block "
                "built without cross-attention."
            )

        # Masked multi-head self-attention.
        residual = x
        x = self.self_attention_norm.normalize_input(x)
        attended = self.self_attention(
            x,
            x,
            query_mask=decoder_padding_mask,
            value_mask=decoder_padding_mask,
            use_causal_mask=True,
            return_attention_scores=return_attention_scores,
            training=training,
            cache=cache,
            cache_index=cache_index,
            preallocated=preallocated,
        )
        attended = attended if isinstance(attended, tuple) else (attended,)
        x, self_scores = attended[0], None
        if return_attention_scores:
            self_scores = attended[1]
        if cache is not None:
            cache = attended[-1]
        x = self.self_attention_norm(residual, x, training=training)

        # Multi-head attention over the encoder outputs.
        cross_scores = None
        if has_encoder:
            residual = x
            x = self.cross_attention_norm.normalize_input(x)
            if cross_attention_cache is None:
                attended = self.cross_attention(
                    x,
                    encoder_outputs,
                    query_mask=decoder_padding_mask,
                    value_mask=encoder_padding_mask,
                    return_attention_scores=return_attention_scores,
                    training=training,
                )
                x, cross_scores = attended if return_attention_scores else (attended, None)
            else:
                x, cross_scores = self._attend_to_memory(
                    x,
                    cross_attention_cache,
                    decoder_padding_mask,
                    encoder_padding_mask,
                    training,
                )
            x = self.cross_attention_norm(residual, x, training=training)

        residual = x
        x = self.feed_forward(self.feed_forward_norm.normalize_input(x))
        x = self.feed_forward_norm(residual, x, training=training)

        results = (x,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (self_scores,)
            if cross_scores is not None:
                results += (cross_scores,)
        return results[0] if len(results) == 1 else results

    def _attend_to_memory(self, x, memory, x_mask, memory_mask, training):
        """Cross-attention of `x` `(B·W, T, d)` to `memory` of `B` sources.

        Cross-attention has no causal mask, so the `W` rows of a source
        (beam search's hypotheses) may attend as the `W · T` queries of one
        row `(B, W·T, d)`: the same result as `W` copies of the memory,
        without the copies.

        Returns:
            `(output (B·W, T, d), weights (B·W, h, T, S))`.
        """
        rows, length, width = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        sources = ops.shape(memory["key"])[0]
        if x_mask is not None:
            x_mask = ops.reshape(x_mask, (sources, -1))
        x = ops.reshape(x, (sources, -1, width))
        x, scores = self.cross_attention(
            x,
            x,
            attention_mask=masking.attention_mask(x_mask, memory_mask),
            return_attention_scores=True,
            training=training,
            cache=memory,
        )
        heads, keys = self.num_heads, ops.shape(scores)[-1]
        scores = ops.reshape(scores, (sources, heads, -1, length, keys))
        scores = ops.transpose(scores, (0, 2, 1, 3, 4))  # (B, W, h, T, S)
        return (
            ops.reshape(x, (rows, length, width)),
            ops.reshape(scores, (rows, heads, length, keys)),
        )
