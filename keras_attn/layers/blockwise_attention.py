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
        query: tensor of shape `(B, h, Tq, d_k)`.
        key: tensor of shape `(B, h, Tk, d_k)`.
        value: tensor of shape `(B, h, Tk, d_v)`.
        query_mask: bool tensor of shape `(B, Tq)`. `True` for real queries;
            padded queries attend to nothing. Defaults to None.
        key_mask: bool tensor of shape `(B, Tk)`. `True` for real keys.
            Defaults to None.
        attention_mask: bool tensor broadcastable to `(B, Tq, Tk)`. Its last axis is
            `Tk` or 1; sliced per block (memory the caller already spent).
            Defaults to None.
        causal: bool. Whether query `i` sees keys `<= query_start + i` only.
            Defaults to False.
        query_start: int or scalar int tensor. Position of the first query (cached
            decoding). Defaults to 0.
        block_size: int. Keys per block. Defaults to 512.
        dropout_rate: float. Dropout rate on the attention weights. Defaults to 0.0.
        dropout_seed: int32 tensor of shape `(2,)`. Seed of the dropout masks,
            needed when `dropout_rate` is not 0; block `j`'s mask is
            `blockwise_dropout_keep(dropout_seed, j, ...)`. Defaults to None.

    Returns:
        A tensor of shape `(B, h, Tq, d_v)`, in the dtype of `query`.
    """
    blocks = _KeyBlocks(
        query, key, key_mask, attention_mask, query_mask, causal, query_start, block_size
    )
    dropout = _BlockDropout(dropout_rate, dropout_seed, blocks)
    scale = 1.0 / math.sqrt(query.shape[-1])
    q32 = tf.cast(query, tf.float32) * scale
    k32, v32 = (tf.cast(blocks.pad(x, 2), tf.float32) for x in (key, value))

    @tf.custom_gradient
    def attend(q, k, v):
        output, log_normalizer = _forward(blocks, dropout, q, k, v)

        def grad(d_output):
            return _backward(blocks, dropout, q, k, v, output, log_normalizer, d_output)

        return output, grad

    return tf.cast(attend(q32, k32, v32), query.dtype)


class _KeyBlocks:
    """The keys cut into blocks of `block_size` (the last padded), and each block's mask."""

    def __init__(
        self, query, key, key_mask, attention_mask, query_mask, causal, query_start, block_size
    ):
        shape = tf.shape(query)
        self.batch, self.heads, self.length = shape[0], shape[1], shape[2]
        self.keys = tf.shape(key)[2]
        # short keys: one block, no padding
        self.size = tf.minimum(block_size, tf.maximum(self.keys, 1))
        self.count = (self.keys + self.size - 1) // self.size
        self.causal = causal
        # Every key past Tk is padding; masks broadcast to (B, 1, Tq, block).
        key_mask = (
            tf.ones([self.batch, self.keys], tf.bool)
            if key_mask is None
            else tf.cast(key_mask, tf.bool)
        )
        self.key_mask = self.pad(key_mask, 1, False)
        if attention_mask is not None:
            attention_mask = tf.cast(attention_mask, tf.bool)
            if attention_mask.shape.rank == 2:
                attention_mask = attention_mask[None]
            if attention_mask.shape[-1] != 1:
                attention_mask = self.pad(attention_mask, 2, False)
        self.attention_mask = attention_mask
        self.query_keep = (
            None if query_mask is None else tf.cast(query_mask, tf.bool)[:, None, :, None]
        )
        self.query_positions = tf.range(self.length) + tf.cast(query_start, tf.int32)

    def pad(self, x, axis, value=0):
        """`x` with its key axis `axis` padded to whole blocks."""
        paddings = [[0, 0]] * len(x.shape)
        paddings[axis] = [0, self.count * self.size - self.keys]
        return tf.pad(x, paddings, constant_values=value)

    def block(self, x, j):
        """Block `j` of `x`'s key axis (its third)."""
        return x[:, :, j * self.size : (j + 1) * self.size]

    def mask(self, j):
        """`(B, 1|h, 1|Tq, blk)`: which keys of block `j` each query sees."""
        start = j * self.size
        mask = self.key_mask[:, None, None, start : start + self.size]  # (B, 1, 1, blk)
        if self.attention_mask is not None:
            sliced = self.attention_mask
            if sliced.shape[-1] != 1:
                sliced = sliced[..., start : start + self.size]
            mask = mask & sliced[:, None]
        if self.causal:
            key_positions = tf.range(start, start + self.size)
            mask = mask & (self.query_positions[:, None] >= key_positions[None, :])[None, None]
        if self.query_keep is not None:
            mask = mask & self.query_keep
        return mask


class _BlockDropout:
    """Dropout on the attention weights, block by block, the same masks forward and backward."""

    def __init__(self, rate, seed, blocks):
        self.rate, self.seed, self.blocks = rate, seed, blocks

    def __call__(self, weights, j):
        if not self.rate:
            return weights
        b = self.blocks
        shape = [b.batch, b.heads, b.length, b.size]
        return weights * blockwise_dropout_keep(self.seed, j, shape, self.rate)


def _forward(blocks, dropout, q, k, v):
    """`(output, log_normalizer)`: FlashAttention's algorithm 1, a block of keys at a time, the
    running maximum m, denominator l and output o rescaled as each arrives."""

    def body(j, m, l, o):
        scores = tf.matmul(q, blocks.block(k, j), transpose_b=True)  # (B, h, Tq, blk)
        mask = blocks.mask(j)
        scores = tf.where(mask, scores, _LOWEST)
        m_new = tf.maximum(m, tf.reduce_max(scores, axis=-1))
        p = tf.where(mask, tf.exp(scores - m_new[..., None]), 0.0)
        correction = tf.exp(m - m_new)
        l = l * correction + tf.reduce_sum(p, axis=-1)
        o = o * correction[..., None] + tf.matmul(dropout(p, j), blocks.block(v, j))
        return j + 1, m_new, l, o

    stats = tf.fill([blocks.batch, blocks.heads, blocks.length], _LOWEST)
    _, m, l, o = tf.while_loop(
        lambda j, *_: j < blocks.count,
        body,
        (
            0,
            stats,
            tf.zeros_like(stats),
            tf.zeros([blocks.batch, blocks.heads, blocks.length, tf.shape(v)[-1]]),
        ),
        parallel_iterations=1,  # one block's scores alive at a time: that is the point
    )
    attended = l > 0
    safe_l = tf.where(attended, l, 1.0)
    output = tf.where(attended[..., None], o / safe_l[..., None], 0.0)
    return output, tf.where(attended, m + tf.math.log(safe_l), 0.0)


def _backward(blocks, dropout, q, k, v, output, log_normalizer, d_output):
    """`(d_q, d_k, d_v)`: algorithm 2, each block's weights recomputed from the saved
    log-normalizer L = m + log l, exp(s - L), instead of stored."""
    d_output = tf.cast(d_output, tf.float32)
    delta = tf.reduce_sum(d_output * output, axis=-1)  # rowsum(dO ⊙ O)

    def backward(j, d_q, d_keys, d_values):
        scores = tf.matmul(q, blocks.block(k, j), transpose_b=True)
        weights = tf.where(blocks.mask(j), tf.exp(scores - log_normalizer[..., None]), 0.0)  # P
        d_values = d_values.write(j, tf.matmul(dropout(weights, j), d_output, transpose_a=True))
        d_weights = dropout(tf.matmul(d_output, blocks.block(v, j), transpose_b=True), j)
        d_scores = weights * (d_weights - delta[..., None])
        d_q += tf.matmul(d_scores, blocks.block(k, j))
        d_keys = d_keys.write(j, tf.matmul(d_scores, q, transpose_a=True))
        return j + 1, d_q, d_keys, d_values

    arrays = [tf.TensorArray(tf.float32, size=blocks.count, element_shape=None) for _ in range(2)]
    _, d_q, d_keys, d_values = tf.while_loop(
        lambda j, *_: j < blocks.count,
        backward,
        (0, tf.zeros_like(q), *arrays),
        parallel_iterations=1,
    )
    return d_q, _join_blocks(d_keys), _join_blocks(d_values)


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

    Args:
        seed: int tensor of shape `(2,)`. The seed of every block's mask.
        block_index: int or scalar int32 tensor. The key block `j`.
        shape: list. The shape of the multipliers, `[B, h, Tq, block]`.
        rate: float. The dropout rate, in [0, 1).

    Returns:
        A float32 tensor of shape `shape`.
    """
    block_seed = tf.stack([tf.cast(seed[0], tf.int32), tf.cast(seed[1], tf.int32) + block_index])
    uniform = tf.random.stateless_uniform(shape, block_seed)
    return tf.where(uniform >= rate, 1.0 / (1.0 - rate), 0.0)
