"""Memory-efficient attention: keys in blocks, an online softmax (FlashAttention).

softmax(Q Kᵀ / √d) V without the `(B, h, Tq, Tk)` score matrix. The keys are
visited one block at a time; for every query a running maximum m, a running
denominator l and a running output o are rescaled as each block arrives
(Milakov & Gimelshein 2018; Dao et al. 2022, algorithm 1):

    s = q kⱼᵀ / √d          m' = max(m, max s)        p = exp(s - m')
    l = l · e^(m - m') + Σ p                          o = o · e^(m - m') + p vⱼ

and the output is o / l. The gradient recomputes each block's weights from
the saved log-normalizer L = m + log l instead of storing them (algorithm 2),
so a training step holds `O(B · h · Tq · block)` attention memory, linear in
the length, where the plain path holds `O(B · h · Tq · Tk)`.

TensorFlow-only (a `tf.while_loop` and a `tf.custom_gradient`): the package
runs on the TensorFlow backend. No custom kernel: matmuls, exp and reductions.
"""

import math

import tensorflow as tf

_LOWEST = -1e30  # a finite "minus infinity": exp(_LOWEST - m) is 0, never NaN


def blockwise_attention(
    query,
    key,
    value,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    causal=False,
    query_start=0,
    block_size=512,
    dropout_rate=0.0,
    dropout_seed=None,
):
    """Scaled dot-product attention over key blocks, for every head at once.

    Equals `scaled_dot_product_attention` (outputs and gradients, to float32
    rounding), a query whose keys are all masked included (zero output).

    Args:
        query: `(B, h, Tq, d_k)`.
        key: `(B, h, Tk, d_k)`.
        value: `(B, h, Tk, d_v)`.
        query_mask: optional `(B, Tq)` booleans, `True` for real queries;
            padded queries attend to nothing.
        key_mask: optional `(B, Tk)` booleans, `True` for real keys.
        attention_mask: optional booleans broadcastable to `(B, Tq, Tk)`
            with a last axis of `Tk` or 1; sliced per block (memory the
            caller already spent).
        causal: query `i` sees keys `<= query_start + i` only.
        query_start: position of the first query (cached decoding).
        block_size: keys per block.
        dropout_rate: dropout on the attention weights.
        dropout_seed: `(2,)` int32 seed of the dropout masks; block `j`'s
            mask is `blockwise_dropout_keep(dropout_seed, j, ...)`.

    Returns:
        `(B, h, Tq, d_v)`, in the dtype of `query`.
    """
    dtype = query.dtype
    shape = tf.shape(query)
    batch, heads, length = shape[0], shape[1], shape[2]
    keys = tf.shape(key)[2]
    block_size = tf.minimum(block_size, tf.maximum(keys, 1))  # short keys: one block, no padding
    blocks = (keys + block_size - 1) // block_size
    padded = blocks * block_size

    def pad_keys(x, axis, value=0):
        paddings = [[0, 0]] * len(x.shape)
        paddings[axis] = [0, padded - keys]
        return tf.pad(x, paddings, constant_values=value)

    # Every key past Tk is padding; masks broadcast to (B, 1, Tq, block).
    key_mask = tf.ones([batch, keys], tf.bool) if key_mask is None else tf.cast(key_mask, tf.bool)
    key_mask = pad_keys(key_mask, 1, False)
    if attention_mask is not None:
        attention_mask = tf.cast(attention_mask, tf.bool)
        if attention_mask.shape.rank == 2:
            attention_mask = attention_mask[None]
        if attention_mask.shape[-1] != 1:
            attention_mask = pad_keys(attention_mask, 2, False)
    query_keep = None if query_mask is None else tf.cast(query_mask, tf.bool)[:, None, :, None]
    query_positions = tf.range(length) + tf.cast(query_start, tf.int32)

    def block_mask(j):
        start = j * block_size
        mask = key_mask[:, None, None, start : start + block_size]  # (B, 1, 1, blk)
        if attention_mask is not None:
            sliced = attention_mask
            if attention_mask.shape[-1] != 1:
                sliced = attention_mask[..., start : start + block_size]
            mask = mask & sliced[:, None]
        if causal:
            key_positions = tf.range(start, start + block_size)
            mask = mask & (query_positions[:, None] >= key_positions[None, :])[None, None]
        if query_keep is not None:
            mask = mask & query_keep
        return mask

    scale = 1.0 / math.sqrt(query.shape[-1])
    q32 = tf.cast(query, tf.float32) * scale
    k32, v32 = tf.cast(pad_keys(key, 2), tf.float32), tf.cast(pad_keys(value, 2), tf.float32)

    def block(x, j):
        return x[:, :, j * block_size : (j + 1) * block_size]

    def keep(j):
        return blockwise_dropout_keep(
            dropout_seed, j, [batch, heads, length, block_size], dropout_rate
        )

    def weights_of_block(j, log_normalizer):
        """exp(s - L): the final softmax weights of block `j`, 0 where masked."""
        scores = tf.matmul(q32, block(k32, j), transpose_b=True)
        weights = tf.exp(scores - log_normalizer[..., None])
        return tf.where(block_mask(j), weights, 0.0)

    @tf.custom_gradient
    def attend(q, k, v):
        def body(j, m, l, o):
            scores = tf.matmul(q, block(k, j), transpose_b=True)  # (B, h, Tq, blk)
            mask = block_mask(j)
            scores = tf.where(mask, scores, _LOWEST)
            m_new = tf.maximum(m, tf.reduce_max(scores, axis=-1))
            p = tf.where(mask, tf.exp(scores - m_new[..., None]), 0.0)
            correction = tf.exp(m - m_new)
            l = l * correction + tf.reduce_sum(p, axis=-1)
            if dropout_rate:
                p = p * keep(j)
            o = o * correction[..., None] + tf.matmul(p, block(v, j))
            return j + 1, m_new, l, o

        stats = tf.fill([batch, heads, length], _LOWEST)
        _, m, l, o = tf.while_loop(
            lambda j, *_: j < blocks,
            body,
            (0, stats, tf.zeros_like(stats), tf.zeros([batch, heads, length, tf.shape(v)[-1]])),
            parallel_iterations=1,  # one block's scores alive at a time: that is the point
        )
        attended = l > 0
        safe_l = tf.where(attended, l, 1.0)
        output = tf.where(attended[..., None], o / safe_l[..., None], 0.0)
        log_normalizer = tf.where(attended, m + tf.math.log(safe_l), 0.0)

        def grad(d_output):
            d_output = tf.cast(d_output, tf.float32)
            delta = tf.reduce_sum(d_output * output, axis=-1)  # rowsum(dO ⊙ O)

            def backward(j, d_q, d_keys, d_values):
                weights = weights_of_block(j, log_normalizer)  # P, (B, h, Tq, blk)
                dropped = weights * keep(j) if dropout_rate else weights
                d_values = d_values.write(j, tf.matmul(dropped, d_output, transpose_a=True))
                d_weights = tf.matmul(d_output, block(v, j), transpose_b=True)
                if dropout_rate:
                    d_weights = d_weights * keep(j)
                d_scores = weights * (d_weights - delta[..., None])
                d_q += tf.matmul(d_scores, block(k, j))
                d_keys = d_keys.write(j, tf.matmul(d_scores, q, transpose_a=True))
                return j + 1, d_q, d_keys, d_values

            arrays = [tf.TensorArray(tf.float32, size=blocks, element_shape=None) for _ in range(2)]
            _, d_q, d_keys, d_values = tf.while_loop(
                lambda j, *_: j < blocks,
                backward,
                (0, tf.zeros_like(q), *arrays),
                parallel_iterations=1,
            )
            return d_q, _join_blocks(d_keys), _join_blocks(d_values)

        return output, grad

    output = attend(q32, k32, v32)
    return tf.cast(output, dtype)


def _join_blocks(array):
    """TensorArray of `(B, h, blk, d)` blocks → `(B, h, blocks · blk, d)`."""
    stacked = array.stack()  # (blocks, B, h, blk, d)
    shape = tf.shape(stacked)
    joined = tf.transpose(stacked, [1, 2, 0, 3, 4])
    return tf.reshape(joined, [shape[1], shape[2], shape[0] * shape[3], shape[4]])


def blockwise_dropout_keep(seed, block_index, shape, rate):
    """The dropout multipliers of key block `block_index`: 0 or 1 / (1 - rate).

    Stateless in (`seed`, `block_index`), so the backward pass regenerates
    exactly the forward pass's mask instead of storing it.
    """
    block_seed = tf.stack([tf.cast(seed[0], tf.int32), tf.cast(seed[1], tf.int32) + block_index])
    uniform = tf.random.stateless_uniform(shape, block_seed)
    return tf.where(uniform >= rate, 1.0 / (1.0 - rate), 0.0)
