"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, 3.2)."""

import math

import keras
from keras import ops

from keras_attn.layers import masking
from keras_attn.layers.backend import optimization_barrier_under_xla, require_tensorflow
from keras_attn.layers.blockwise_attention import blockwise_attention
from keras_attn.layers.initializers import clone_initializer


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, for every head at once.

    The inputs are head-major, so both products are matmuls batched over
    `(B, h)` (Q Kᵀ with the transpose folded into the matmul) and no operand
    is transposed: a key/value cache is read as it is stored.

    Args:
        query: tensor of shape `(B, h, Tq, d_k)`.
        key: tensor of shape `(B, h, Tk, d_k)`.
        value: tensor of shape `(B, h, Tk, d_v)`.
        mask: bool tensor broadcastable to `(B, Tq, Tk)`, `True` = may attend. None
            masks nothing. Defaults to None.
        dropout: keras.layers.Dropout. Applied to the weights; None applies none.
            Defaults to None.
        training: bool. Whether dropout is active. Defaults to None.

    Returns:
        tuple. `(output, weights)`: the output, of shape `(B, h, Tq, d_v)`, and the
        attention weights, of shape `(B, h, Tq, Tk)` (before dropout).
    """
    scale = ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype)
    # One query (a decoding step): products and sums, which cost less than a
    # batch of 1-row matmuls.
    one_query = query.shape[2] == 1
    if one_query:
        scores = ops.expand_dims(ops.sum(query * scale * key, axis=-1), 2)
    else:
        scores = ops.einsum("bhqd,bhkd->bhqk", query * scale, key)  # Q Kᵀ / √d_k
    if mask is not None:
        mask = ops.expand_dims(mask, 1)  # add the head axis
    weights = masking.masked_softmax(scores, mask)
    dropped = weights if dropout is None else dropout(weights, training=training)
    if one_query:
        output = ops.sum(ops.expand_dims(dropped[:, :, 0], -1) * value, axis=2, keepdims=True)
    else:
        output = ops.einsum("bhqk,bhkv->bhqv", dropped, value)
    return output, weights


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, where
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) is scaled dot-product
    attention. The weights have the shapes and order of
    `keras.layers.MultiHeadAttention` (query, key, value, output; kernel
    then bias), so weights copy across with `set_weights`.

    Self-attention (`value is query` and no `key`) without a cache runs the
    three input projections as one fused matmul when `key_dim` equals
    `value_dim`.

    Incremental decoding: a `cache` holds keys and values already projected,
    head-major, as a dict `{"key": (B, h, L, d_k), "value": (B, h, L, d_v)}`
    (see `empty_cache` and `project_key_value`). With `cache_index`, the
    cache holds the `L = cache_index` steps so far: the projections of the
    new steps are appended to it and the query attends to its steps up to
    its own; without it, the cache replaces `key` and `value` (precomputed
    cross-attention). Per step, nothing is recomputed; appending copies the
    steps so far (TensorFlow updates no tensor in place), which costs less
    than writing into a preallocated cache of the final length does. A
    preallocated cache (`empty_cache(..., length=)`, then
    `preallocated=True`) keeps every shape fixed from step to step, which
    a decoding loop compiled once by XLA needs.

    Args:
        num_heads: int. Number of attention heads `h`; positive.
        key_dim: int. Size of each head for query and key, `d_k`; positive.
        value_dim: int. Size of each head for value, `d_v`; `key_dim` when not
            given. Defaults to None.
        dropout: float. Dropout rate on the attention weights, in [0, 1).
            Defaults to 0.0.
        use_bias: bool. Whether the projections have biases. Defaults to True.
        output_dim: int. Size of the output (Keras's `output_shape`, as an int);
            the query's feature size when not given. Defaults to None.
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            the projection kernels; each kernel draws from its own copy (see
            `clone_initializer`). Defaults to "glorot_uniform".
        bias_initializer: str or keras.initializers.Initializer. Initializer of the
            projection biases (each its own copy). Defaults to "zeros".
        memory_efficient: str or bool. One of `"auto"`, `True`, `False`. Whether to compute
            attention over blocks of `key_block_size` keys with an online softmax
            (`blockwise_attention`, the FlashAttention recurrence), whose memory
            grows linearly with the length instead of quadratically. `"auto"` uses
            it on the TensorFlow backend from `BLOCKWISE_FROM` (2048) keys on (a
            static length); `True` needs the TensorFlow backend. Never with
            `return_attention_scores` or a cache (the weights would have to be
            materialized; a decoding step is small). Outputs and gradients equal
            the plain path. Defaults to "auto".
        key_block_size: int. Keys per block of the memory-efficient path; positive.
            Defaults to 512.
        seed: int or None. Seed of the memory-efficient path's attention dropout.
            Defaults to None.

    Call arguments:
        query: tensor of shape `(B, Tq, dim)`.
        value: tensor of shape `(B, Tk, dim)`.
        key: tensor of shape `(B, Tk, dim)`. The keys; `value` when not given.
            Defaults to None.
        attention_mask: bool tensor of shape `(B, Tq, Tk)`, `True` = may attend.
            Defaults to None.
        use_causal_mask: bool. Whether query `i` may only attend to keys `<= i`.
            Defaults to False.
        return_attention_scores: bool. Whether to also return the weights
            `(B, h, Tq, Tk)`. Defaults to False.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).
        cache: dict. Projected keys and values,
            `{"key": (B, h, L, d_k), "value": (B, h, L, d_v)}`. With
            `cache_index`, the projections of `key`/`value` `(B, Tq, dim)`
            are appended to it as steps `L ... L + Tq - 1`, attention is
            causal over its `L + Tq` steps and the updated cache is
            returned; without `cache_index`, it is used as is instead of
            `key` and `value` (precomputed cross-attention). Defaults to None.
        cache_index: int or scalar int tensor. The step index of `query[:, 0]`:
            the number of steps `L` the cache holds. Defaults to None.
        preallocated: bool. Whether the cache given with `cache_index` has its
            final length `L` (`empty_cache(..., length=)`): the projections of the
            new steps are written over its steps `cache_index ...
            cache_index + Tq - 1` (which must lie within `L`), the steps
            after them (not written yet) are masked, and the cache keeps
            its shape. Defaults to False.
        query_mask: bool tensor of shape `(B, Tq)`. Padding mask of the queries;
            Keras fills it from `query`'s mask (e.g. from
            `Embedding(mask_zero=True)`). Defaults to None.
        value_mask: bool tensor of shape `(B, Tk)`. Padding mask of the values;
            Keras fills it from `value`'s mask. Defaults to None.
        key_mask: bool tensor of shape `(B, Tk)`. Padding mask of the keys; Keras
            fills it from `key`'s mask. A key is padding where either mask says so,
            as in `keras.layers.MultiHeadAttention`. Ignored with a cache.
            Defaults to None.

    Returns:
        `output`, a tensor of shape `(B, Tq, output_dim)`; then the attention
        weights `(B, h, Tq, Tk)` if `return_attention_scores` (`Tk = L + Tq` with
        a cache to append to, `L` with a precomputed or preallocated one); then
        the updated cache if `cache` and `cache_index` were given. A query whose
        keys are all masked gets all-zero weights.

    Raises:
        ValueError: if `num_heads`, `key_dim`, `value_dim` (when given) or
            `key_block_size` is not a positive integer, `dropout` is not in
            [0, 1), or `memory_efficient` is not `"auto"`, `True` or `False`;
            when called, if `query`, `key` or `value` does not have rank 3, `key`
            and `value` differ in length, or `preallocated=True` comes without
            both `cache` and `cache_index`.
        RuntimeError: if `memory_efficient=True` on a backend other than
            TensorFlow.

    Example:

        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> x = np.random.rand(3, 5, 8).astype("float32")
        >>> out, weights = mha(x, x, return_attention_scores=True)
        >>> out.shape, weights.shape
        (TensorShape([3, 5, 8]), TensorShape([3, 2, 5, 5]))

    Decoding one step at a time with a cache gives the causal pass:

    >>> cache = mha.empty_cache(batch_size=3)
    >>> for t in range(5):
    ...     step, cache = mha(x[:, t:t + 1], x[:, t:t + 1], cache=cache,
    ...                       cache_index=t)
    >>> step.shape, cache["key"].shape
    (TensorShape([3, 1, 8]), TensorShape([3, 2, 5, 4]))
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        memory_efficient="auto",
        key_block_size=512,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_positive_int("num_heads", num_heads)
        _check_positive_int("key_dim", key_dim)
        if value_dim is not None:
            _check_positive_int("value_dim", value_dim)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.dropout_layer = (
            keras.layers.Dropout(dropout, dtype=self.dtype_policy) if dropout else None
        )
        if memory_efficient not in ("auto", True, False):
            raise ValueError(
                f"`memory_efficient` must be 'auto', True or False, got {memory_efficient!r}."
            )
        _check_positive_int("key_block_size", key_block_size)
        self.memory_efficient = memory_efficient
        if memory_efficient is True:
            require_tensorflow(
                "Memory-efficient attention", "its gradient is a TensorFlow custom gradient"
            )
        self.key_block_size = key_block_size
        self.seed = seed
        self.seed_generator = (
            keras.random.SeedGenerator(seed) if dropout and memory_efficient is not False else None
        )
        self.supports_masking = True

    # Keys from which `memory_efficient="auto"` attends block by block: there
    # the (B, h, T, T) weights of a training step outgrow the blocks' cost.
    BLOCKWISE_FROM = 2048

    def _blockwise(self, key_length, scores, cache):
        """Whether a call takes the memory-efficient path."""
        if scores or cache is not None or self.memory_efficient is False:
            return False
        if self.memory_efficient is True:
            return True
        on_tensorflow = keras.backend.backend() == "tensorflow"  # "auto" elsewhere: the plain path
        return on_tensorflow and key_length is not None and key_length >= self.BLOCKWISE_FROM

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (
            ("query", query_shape),
            ("value", value_shape),
            ("key", key_shape),
        ):
            if len(shape) != 3:
                raise ValueError(
                    f"MultiHeadAttention: `{name}` must have rank 3 "
                    f"(batch, length, features), got shape {tuple(shape)}."
                )
        if (
            key_shape[1] is not None
            and value_shape[1] is not None
            and key_shape[1] != value_shape[1]
        ):
            raise ValueError(
                "MultiHeadAttention: `key` and `value` must have the same "
                f"length, got key {tuple(key_shape)} and value "
                f"{tuple(value_shape)}."
            )
        h, dk, dv = self.num_heads, self.key_dim, self.value_dim
        out_dim = self.output_dim or query_shape[-1]
        self.query_kernel, self.query_bias = self._projection(
            "query", (query_shape[-1], h, dk), (h, dk)
        )
        self.key_kernel, self.key_bias = self._projection("key", (key_shape[-1], h, dk), (h, dk))
        self.value_kernel, self.value_bias = self._projection(
            "value", (value_shape[-1], h, dv), (h, dv)
        )
        self.output_kernel, self.output_bias = self._projection(
            "output", (h, dv, out_dim), (out_dim,)
        )

    def _projection(self, name, kernel_shape, bias_shape):
        kernel = self.add_weight(
            name=f"{name}_kernel",
            shape=kernel_shape,
            initializer=clone_initializer(self.kernel_initializer, f"{name}_kernel"),
        )
        bias = None
        if self.use_bias:
            bias = self.add_weight(
                name=f"{name}_bias",
                shape=bias_shape,
                initializer=clone_initializer(self.bias_initializer, f"{name}_bias"),
            )
        return kernel, bias

    def project(self, x, kernel, bias):
        """`(B, T, dim)` @ `(dim, h, d)` (+ bias) → heads `(B, h, T, d)`.

        Args:
            x: tensor of shape `(B, T, dim)`.
            kernel: tensor of shape `(dim, h, d)`. One of the layer's kernels.
            bias: tensor of shape `(h, d)`, or None for no bias.

        Returns:
            A tensor of shape `(B, h, T, d)`: the heads.
        """
        dim, h, d = kernel.shape
        kernel = optimization_barrier_under_xla(ops.reshape(kernel, (dim, h * d)))
        y = ops.matmul(ops.reshape(x, (-1, dim)), kernel)
        if bias is not None:
            y = y + ops.reshape(bias, (h * d,))
        return _split_heads(y, ops.shape(x)[0], ops.shape(x)[1], h)

    def _project_self(self, x):
        """Q, K, V heads of self-attention from one fused `(dim, 3·h·d)` matmul."""
        h, d = self.num_heads, self.key_dim
        kernel = ops.concatenate(
            [
                ops.reshape(k, (k.shape[0], h * d))
                for k in (self.query_kernel, self.key_kernel, self.value_kernel)
            ],
            axis=1,
        )
        y = ops.matmul(ops.reshape(x, (-1, kernel.shape[0])), kernel)
        if self.use_bias:
            y = y + ops.concatenate(
                [
                    ops.reshape(b, (h * d,))
                    for b in (self.query_bias, self.key_bias, self.value_bias)
                ],
                axis=0,
            )
        # ops.split, not slicing: the gradient of three slices of one tensor
        # materializes three full-size zero tensors.
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return [_split_heads(t, batch, length, h) for t in ops.split(y, 3, axis=-1)]

    def project_key_value(self, key, value=None):
        """Projects encoder outputs once, for `cache` without `cache_index`.

        Decoders pass the result as `cache` at every step, so the
        cross-attention keys and values are computed only once.

        Args:
            key: tensor of shape `(B, S, dim)`. The encoder outputs the keys are
                projected from.
            value: tensor of shape `(B, S, dim)`. The encoder outputs the values
                are projected from; `key` when not given. Defaults to None.

        Returns:
            dict. `{"key": (B, h, S, d_k), "value": (B, h, S, d_v)}`.
        """
        value = key if value is None else value
        return {
            "key": self.project(key, self.key_kernel, self.key_bias),
            "value": self.project(value, self.value_kernel, self.value_bias),
        }

    def empty_cache(self, batch_size, dtype=None, length=None):
        """A self-attention cache that holds no step yet.

        Args:
            batch_size: int or scalar int tensor. `B`.
            dtype: str. The cache's dtype; the layer's compute dtype when not
                given. Defaults to None.
            length: int. The steps the cache will hold (zeros to be written with
                `preallocated=True`); None for a cache that grows by each step.
                Defaults to None.

        Returns:
            dict. `{"key": (B, h, L, d_k), "value": (B, h, L, d_v)}` in `dtype`,
            `L` = `length` or 0.
        """
        dtype = dtype or self.compute_dtype
        shape = (batch_size, self.num_heads, 0 if length is None else length)
        return {
            "key": ops.zeros(shape + (self.key_dim,), dtype),
            "value": ops.zeros(shape + (self.value_dim,), dtype),
        }

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_index=None,
        preallocated=False,
        query_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        precomputed = cache is not None and cache_index is None
        updates_cache = cache is not None and cache_index is not None
        if preallocated and not updates_cache:
            raise ValueError("preallocated=True writes into a `cache` at `cache_index`: give both")
        # Not with a cache: a decoding step is too small to amortize
        # concatenating the three kernels.
        fuse = key is None and value is query and cache is None and self.key_dim == self.value_dim
        if key is None:
            key = value
        # As Keras: a key is padding where its value is, or where its own mask says so.
        key_mask = masking.merge_masks(value_mask, key_mask)

        # Heads (B, h, T, d).
        if fuse:
            q, k, v = self._project_self(query)
        else:
            q = self.project(query, self.query_kernel, self.query_bias)
            if precomputed:
                k, v = cache["key"], cache["value"]
            else:
                k = self.project(key, self.key_kernel, self.key_bias)
                v = self.project(value, self.value_kernel, self.value_bias)
        if preallocated:
            start = (0, 0, cache_index, 0)
            k = ops.slice_update(cache["key"], start, ops.cast(k, cache["key"].dtype))
            v = ops.slice_update(cache["value"], start, ops.cast(v, cache["value"].dtype))
            cache = {"key": k, "value": v}
            use_causal_mask = True  # also masks the steps not written yet
        elif updates_cache:
            k = ops.concatenate([cache["key"], k], axis=2)
            v = ops.concatenate([cache["value"], v], axis=2)
            cache = {"key": k, "value": v}
            # New steps must not see the ones after them (one step sees all).
            use_causal_mask = query.shape[1] != 1

        if cache is not None:
            key_mask = None  # a cache's length differs from the inputs'
        start = 0 if cache_index is None else cache_index
        if self._blockwise(k.shape[2], return_attention_scores, cache):
            weights = None
            output = self._attend_blockwise(
                q, k, v, query_mask, key_mask, attention_mask, use_causal_mask, start, training
            )
        else:
            causal = None
            if use_causal_mask:
                causal = masking.causal_mask(ops.shape(q)[2], ops.shape(k)[2], query_start=start)
            mask = masking.merge_masks(
                masking.attention_mask(query_mask, key_mask), attention_mask, causal
            )
            output, weights = scaled_dot_product_attention(
                q, k, v, mask, self.dropout_layer, training
            )
        # Concat(head_1, ..., head_h) W^O as one contraction over (h, d_v).
        h, dv, out_dim = self.output_kernel.shape
        batch, length = ops.shape(output)[0], ops.shape(output)[2]
        output = ops.matmul(
            ops.reshape(ops.transpose(output, (0, 2, 1, 3)), (-1, h * dv)),
            ops.reshape(self.output_kernel, (h * dv, out_dim)),
        )
        if self.use_bias:
            output = output + self.output_bias
        output = ops.reshape(output, (batch, length, out_dim))

        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if updates_cache:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def _attend_blockwise(
        self, q, k, v, query_mask, key_mask, attention_mask, causal, start, training
    ):
        rate = self.dropout if training and self.dropout else 0.0
        seed = None
        if rate:
            seed = keras.random.randint((2,), 0, 2**30, seed=self.seed_generator)
        output = blockwise_attention(
            q,
            k,
            v,
            query_mask=query_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            causal=causal,
            query_start=start,
            block_size=self.key_block_size,
            dropout_rate=rate,
            dropout_seed=seed,
        )
        return output

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "memory_efficient": self.memory_efficient,
                "key_block_size": self.key_block_size,
                "seed": self.seed,
            }
        )
        return config


def _split_heads(y, batch, length, heads):
    """`(B·T, h·d)` → `(B, h, T, d)` (B and T given: B may be 0 on a replica)."""
    y = ops.reshape(y, (batch, length, heads, y.shape[-1] // heads))
    return ops.transpose(y, (0, 2, 1, 3))


def _check_positive_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
